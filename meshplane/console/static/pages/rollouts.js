// The rollouts of every project the principal sees, active ones first, updated live from the change stream.

import { listAll, session } from "../api.js";
import { badge, clear, dataTable, h, link, since } from "../dom.js";
import { watch } from "../live.js";

const ACTIVE = ["Progressing", "Paused"];

// While a rollout is active, clusters its waves have not reached keep the version they had.
export const isActive = (spec) => ACTIVE.includes(spec.phase);

// `12 → 15`, or `new → 15` when the change made the object.
export function revisions(spec) {
  return `${spec.fromRevision ?? "new"} → ${spec.toRevision}`;
}

// The wave a rollout is at, `canary (1/3)`; "—" once every wave is behind it.
export function currentWave(spec) {
  const waves = spec.waves || [];
  const index = spec.currentWave ?? 0;
  return index < waves.length ? `${waves[index].name} (${index + 1}/${waves.length})` : "—";
}

// The REST collection of a kind: `API` → `apis`, `RateLimitPolicy` → `ratelimitpolicies`.
export function pluralOf(kind) {
  return `${kind.toLowerCase().replace(/([^aeiou])y$/, "$1ie")}s`;
}

// The console's page of the object a rollout carries.
export function objectHref(rollout) {
  const { kind, name } = rollout.spec.target;
  return `#/objects/${encodeURIComponent(rollout.metadata.project)}/${pluralOf(kind)}/${encodeURIComponent(name)}`;
}

export function rolloutHref(rollout) {
  return `#/rollouts/${encodeURIComponent(rollout.metadata.project)}/${encodeURIComponent(rollout.metadata.name)}`;
}

const keyOf = (rollout) => `${rollout.metadata.project}/${rollout.metadata.name}`;

async function projectsOf(principal) {
  if (principal.project) return [principal.project];
  return (await listAll("/v1/projects")).map((p) => p.metadata.name);
}

async function everyRollout() {
  const projects = await projectsOf(session.principal);
  const lists = await Promise.all(projects.map((p) => listAll(`/v1/projects/${encodeURIComponent(p)}/rollouts`)));
  return lists.flat();
}

export async function render(main) {
  const rollouts = new Map();
  const table = dataTable([
    { key: "phase", label: "Phase", cell: (r) => badge(r.spec.phase), sort: (r) => `${isActive(r.spec) ? 0 : 1}${r.spec.phase}` },
    { key: "name", label: "Rollout", cell: (r) => link(rolloutHref(r), keyOf(r)), sort: keyOf },
    { key: "object", label: "Object", cell: (r) => link(objectHref(r), `${r.spec.target.kind} ${r.spec.target.name}`), sort: (r) => `${r.spec.target.kind} ${r.spec.target.name}` },
    { key: "revision", label: "Revision", cell: (r) => revisions(r.spec), sort: (r) => r.spec.toRevision },
    { key: "wave", label: "Wave", cell: (r) => currentWave(r.spec) },
    { key: "started", label: "Started", cell: (r) => since(r.spec.startedAt), sort: (r) => r.spec.startedAt || "" },
    { key: "reason", label: "Reason", cell: (r) => r.spec.reason || "" },
  ], { caption: "Rollouts, active first", empty: "No rollout yet: changes to objects a rollout policy governs appear here.", rowId: keyOf });
  const counts = h("p", { class: "counts", "aria-live": "polite" });

  function refresh() {
    const all = [...rollouts.values()];
    table.update(all);
    clear(counts, `${all.length} rollouts, ${all.filter((r) => isActive(r.spec)).length} active`);
  }

  async function load() {
    rollouts.clear();
    for (const rollout of await everyRollout()) rollouts.set(keyOf(rollout), rollout);
    refresh();
  }

  clear(main, h("h1", {}, "Rollouts"), counts, table.el);
  await load();
  return watch({
    kind: "Rollout",
    onChange: (change) => {
      if (change.type === "DELETED") rollouts.delete(keyOf(change.object));
      else rollouts.set(keyOf(change.object), change.object);
      refresh();
    },
    onReset: load,
  });
}
