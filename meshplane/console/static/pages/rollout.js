// One rollout: its waves with their clusters advancing live and each bake's progress, and the operator's hand on
// it (pause, resume, promote, abort; roll back a finished one) for roles that may change the rolled-out object.

import { ApiError, call, get, mayWrite } from "../api.js";
import { badge, clear, dataTable, h, link, since, toast } from "../dom.js";
import { watch } from "../live.js";
import { currentWave, isActive, objectHref, pluralOf, revisions } from "./rollouts.js";

const UNIT_SECONDS = { ms: 0.001, s: 1, m: 60, h: 3600 };

// Seconds in a duration as policies write them (`15s`, `1m30s`).
function seconds(text) {
  let total = 0;
  for (const [, amount, unit] of (text || "0s").matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h)/g)) total += Number(amount) * UNIT_SECONDS[unit];
  return total;
}

const part = encodeURIComponent;

function objectPath(rollout) {
  const { kind, name } = rollout.spec.target;
  return `/v1/projects/${part(rollout.metadata.project)}/${pluralOf(kind)}/${part(name)}`;
}

// How far wave `index` baked: {elapsed, total} seconds, or null when it has nothing to bake.
function bakeOf(spec, index) {
  const total = seconds(spec.strategy?.waves?.[index]?.bake);
  if (!total) return null;
  const wave = spec.waves[index];
  if (wave.state === "Succeeded") return { elapsed: total, total };
  if (!wave.bakeStartedAt) return { elapsed: 0, total };
  return { elapsed: Math.min(total, Math.max(0, (Date.now() - Date.parse(wave.bakeStartedAt)) / 1000)), total };
}

function bakeText(spec, index) {
  const bake = bakeOf(spec, index);
  if (!bake) return "no bake";
  const wave = spec.waves[index];
  let text = wave.bakeStartedAt || wave.state === "Succeeded" ? `baked ${Math.floor(bake.elapsed)}s of ${bake.total}s` : `${bake.total}s to bake`;
  if (wave.requests) text += `, ${wave.errors || 0} of ${wave.requests} requests 5xx`;
  return text;
}

// A modal question; resolves true only when `yes` is chosen (Escape or Cancel, which has the focus: false).
function confirmed(question, yes) {
  return new Promise((resolve) => {
    const dialog = h("dialog", { "aria-label": "Confirm" },
      h("p", {}, question),
      h("div", { class: "toolbar" },
        h("button", { type: "button", class: "danger", onclick: () => dialog.close("yes") }, yes),
        h("button", { type: "button", autofocus: true, onclick: () => dialog.close("no") }, "Cancel")));
    dialog.addEventListener("close", () => {
      dialog.remove();
      resolve(dialog.returnValue === "yes");
    });
    document.body.append(dialog);
    dialog.showModal();
  });
}

function targetLabel(rollout) {
  const { kind, name } = rollout.spec.target;
  return `${kind} ${rollout.metadata.project}/${name}`;
}

// What the actions do, each offered only in the phases that allow it.
const ACTIONS = [
  { action: "pause", label: "Pause", offered: (s) => s.phase === "Progressing" },
  { action: "resume", label: "Resume", offered: (s) => s.phase === "Paused" },
  { action: "promote", label: "Promote", offered: isActive, question: (r) => `Give every remaining cluster ${targetLabel(r)} revision ${r.spec.toRevision} now, skipping the waves' gates and bakes?` },
  { action: "abort", label: "Abort", danger: true, offered: isActive, question: (r) => r.spec.fromRevision == null
    ? `Abort the rollout? ${targetLabel(r)} is deleted again: this change made it.`
    : `Abort the rollout? ${targetLabel(r)} is written back to revision ${r.spec.fromRevision}.` },
];

// Write the object's `fromRevision` again as a new change, refused if it changed meanwhile (as `meshplane
// rollback` does): an ordinary write, checked and rolled out like any other.
async function rollBack(rollout) {
  const path = objectPath(rollout);
  const old = await get(`${path}/history/${rollout.spec.fromRevision}`);
  const current = await get(path);
  const metadata = {};
  for (const key of ["name", "project", "labels", "annotations"]) if (old.metadata[key] != null) metadata[key] = old.metadata[key];
  return call("PUT", path, { kind: old.kind, metadata, spec: old.spec }, { headers: { "If-Match": `"${current.metadata.resourceVersion}"` } });
}

function notFound(main, project, name) {
  clear(main, h("h1", {}, "Not found"), h("p", {}, `No rollout ${name} in project ${project} that you may see. `, link("#/rollouts", "See every rollout.")));
}

export async function render(main, { project, name }) {
  const path = `/v1/projects/${part(project)}/rollouts/${part(name)}`;
  let rollout;
  try {
    rollout = await get(path);
  } catch (error) {
    if (error instanceof ApiError && [403, 404].includes(error.status)) return notFound(main, project, name);
    throw error;
  }
  const facts = h("dl", { class: "facts" });
  const actions = h("div", { class: "toolbar rollout-actions", role: "group", "aria-label": "Rollout actions" });
  const problem = h("p", { class: "error", role: "alert" });
  const waves = h("div", { class: "waves" });
  let bakes = [];
  let busy = false;

  async function act(label, work) {
    busy = true;
    drawActions();
    clear(problem);
    try {
      const answer = await work();
      toast(`${label}: done`);
      if (answer?.kind === "Rollout") show(answer);
    } catch (error) {
      if (!(error instanceof ApiError)) throw error;
      clear(problem, error.status === 409 ? `Refused: ${error.message}` : `${label} failed: ${error.message}`);
      show(await get(path).catch(() => rollout));
    } finally {
      busy = false;
      drawActions();
    }
  }

  function drawActions() {
    const spec = rollout.spec;
    const buttons = [];
    if (mayWrite(spec.target.kind, project)) {
      for (const { action, label, danger, offered, question } of ACTIONS) {
        if (!offered(spec)) continue;
        buttons.push(h("button", { type: "button", class: danger ? "danger" : null, disabled: busy, onclick: async () => {
          if (question && !(await confirmed(question(rollout), label))) return;
          act(label, () => call("POST", `${path}/${action}`));
        } }, label));
      }
      if (spec.phase === "Succeeded" && spec.fromRevision != null) {
        buttons.push(h("button", { type: "button", class: "danger", disabled: busy, onclick: async () => {
          if (!(await confirmed(`Roll back ${targetLabel(rollout)} to revision ${spec.fromRevision}? It is written again as a new change, rolled out like any other.`, "Roll back"))) return;
          act("Roll back", () => rollBack(rollout));
        } }, "Roll back"));
      }
    }
    clear(actions, buttons);
  }

  function drawFacts() {
    const spec = rollout.spec;
    const { kind, name: target } = spec.target;
    clear(facts,
      h("dt", {}, "Object"), h("dd", {}, link(objectHref(rollout), `${kind} ${target}`)),
      h("dt", {}, "Revision"), h("dd", {}, revisions(spec)),
      h("dt", {}, "Policy"), h("dd", {}, spec.policy),
      h("dt", {}, "Phase"), h("dd", { id: "rollout-phase" }, badge(spec.phase)),
      h("dt", {}, "Wave"), h("dd", {}, currentWave(spec)),
      h("dt", {}, "Reason"), h("dd", {}, spec.reason || "—"),
      h("dt", {}, "Started"), h("dd", {}, since(spec.startedAt)),
      h("dt", {}, "Finished"), h("dd", {}, spec.finishedAt ? since(spec.finishedAt) : "—"),
    );
  }

  function drawWaves() {
    const spec = rollout.spec;
    bakes = [];
    clear(waves, (spec.waves || []).map((wave, index) => {
      const meter = h("progress", { max: 1, value: 0, "aria-label": `Bake of wave ${wave.name}` });
      const text = h("span", { class: "bake-text" });
      bakes.push({ index, meter, text });
      const table = dataTable([
        { key: "name", label: "Cluster", cell: (c) => link(`#/clusters/${part(c.name)}`, c.name), sort: (c) => c.name },
        { key: "state", label: "State", cell: (c) => badge(c.state), sort: (c) => c.state },
        { key: "since", label: "Since", cell: (c) => since(c.since), sort: (c) => c.since || "" },
        { key: "message", label: "Message", cell: (c) => c.message || "" },
      ], { empty: "No cluster in this wave.", rowId: (c) => c.name });
      table.update(wave.clusters || []);
      const current = index === spec.currentWave && isActive(spec);
      return h("section", { class: "wave", "aria-label": `Wave ${wave.name}`, "aria-current": current ? "step" : null },
        h("h2", {}, `${index + 1}. ${wave.name} `, badge(wave.state)),
        h("p", { class: "bake" }, meter, " ", text),
        table.el);
    }));
    tick();
  }

  function tick() {
    for (const { index, meter, text } of bakes) {
      const bake = bakeOf(rollout.spec, index);
      meter.hidden = !bake;
      if (bake) Object.assign(meter, { max: bake.total, value: bake.elapsed });
      clear(text, bakeText(rollout.spec, index));
    }
  }

  // Draw `next` unless the page already shows a later write (an action's answer can arrive after the stream's).
  function show(next) {
    if (Number(next.metadata.resourceVersion) < Number(rollout.metadata.resourceVersion)) return;
    rollout = next;
    drawFacts();
    drawActions();
    drawWaves();
  }

  clear(main, h("h1", {}, "Rollout ", h("code", {}, name)), facts, actions, problem, h("h2", {}, "Waves"), waves);
  show(rollout);
  const clock = setInterval(tick, 1000);
  const stop = watch({
    kind: "Rollout",
    project,
    since: Number(rollout.metadata.resourceVersion),
    onChange: (change) => {
      if (change.object.metadata.name !== name) return;
      if (change.type === "DELETED") notFound(main, project, name);
      else show(change.object);
    },
    onReset: async () => show(await get(path)),
  });
  return () => {
    clearInterval(clock);
    stop();
  };
}
