// One object: its spec as YAML, where it is delivered (each placed cluster's state, version, message, since),
// its kept versions with a diff between any two, its audit entries; edit and delete for roles that may.
// The delivery matrix and the rest follow the object live (/v1/watch).

import { ApiError, call, get, mayWrite } from "../api.js";
import { badge, clear, dataTable, h, link, since, toast } from "../dom.js";
import { diffView } from "../diff.js";
import { watch } from "../live.js";
import { FORMS, kindOf, pagePath, readYaml, restPath, withoutStatus } from "../objects.js";

const ON_DELETE = {
  refuse: "names it: the delete is refused while it exists",
  cascade: "is deleted with it",
};

function deleteDialog(kind, project, name, path) {
  const note = h("div", { class: "dependents" }, h("p", {}, "Looking for what depends on it…"));
  const refusal = h("p", { class: "error", role: "alert" });
  const confirm = h("button", { type: "button", class: "danger" }, "Delete");
  const cancel = h("button", { type: "button" }, "Cancel");
  const dialog = h("dialog", { "aria-labelledby": "delete-title" },
    h("h2", { id: "delete-title" }, `Delete ${kind.kind} ${name}?`), note, refusal,
    h("div", { class: "toolbar" }, confirm, cancel));
  cancel.addEventListener("click", () => dialog.close());
  dialog.addEventListener("close", () => dialog.remove());
  confirm.addEventListener("click", async () => {
    clear(refusal);
    confirm.disabled = true;
    try {
      await call("DELETE", path);
      dialog.close();
      toast(`${kind.kind} ${name} deleted.`);
      location.hash = pagePath(project, kind.plural);
    } catch (error) {
      if (!(error instanceof ApiError)) throw error;
      clear(refusal, `The server refused: ${error.message}`);
      confirm.disabled = false;
    }
  });
  get(`${path}/dependents`).then(({ items }) => {
    clear(note, items.length
      ? [h("p", {}, "What depends on it:"), h("ul", {}, items.map((d) => h("li", {}, `${d.kind} `, h("strong", {}, d.name), ` (${d.field}) ${ON_DELETE[d.onDelete] || d.onDelete}`)))]
      : h("p", {}, "Nothing names it."));
  }).catch((error) => clear(note, h("p", { class: "error" }, `Could not tell what depends on it: ${error.message}`)));
  document.body.append(dialog);
  dialog.showModal();
  cancel.focus();
}

// A parent as a route names it: [namespace/]name[/section or :port].
function parentName(ref) {
  const where = ref.namespace ? `${ref.namespace}/${ref.name}` : ref.name;
  return `${where}${ref.sectionName ? `/${ref.sectionName}` : ""}${ref.port ? `:${ref.port}` : ""}`;
}

// A route's `status.parents` as its cluster's controller wrote them: each condition with its reason.
function parentsTable() {
  return dataTable([
    { key: "parent", label: "Parent", cell: (p) => h("code", {}, parentName(p.parentRef)), sort: (p) => parentName(p.parentRef) },
    { key: "controller", label: "Controller", cell: (p) => h("code", {}, p.controllerName) },
    { key: "conditions", label: "Conditions", cell: (p) => (p.conditions || []).map((c) => h("span", { class: `badge ${c.status === "True" ? "good" : "bad"}`, title: c.message || "" }, `${c.type}: ${c.reason || c.status}`)) },
  ], { caption: "Parents", empty: "No controller of its cluster has taken it yet.", rowId: (p) => parentName(p.parentRef) });
}

export async function render(main, { project, plural, name }) {
  const kind = await kindOf(plural);
  const path = restPath(project, plural, name);
  let current = await get(path);
  const writable = kind.writable && mayWrite(kind.kind, project);

  const gone = h("p", { class: "error", role: "status" });
  const yamlView = h("pre", { class: "yaml", "aria-label": "Specification (YAML)" });
  const matrix = dataTable([
    { key: "cluster", label: "Cluster", cell: (c) => link(`#/clusters/${encodeURIComponent(c.cluster)}`, c.cluster), sort: (c) => c.cluster },
    { key: "state", label: "State", cell: (c) => badge(c.state), sort: (c) => c.state },
    { key: "version", label: "Version", cell: (c) => h("code", {}, (c.version || "").slice(0, 12)) },
    { key: "message", label: "Message", cell: (c) => c.message || "" },
    { key: "since", label: "Since", cell: (c) => since(c.lastTransitionTime), sort: (c) => c.lastTransitionTime || "" },
  ], { caption: "Delivery", empty: "Not placed on any cluster (or not a kind clusters receive).", rowId: (c) => c.cluster });

  const parents = current.status && "parents" in current.status ? parentsTable() : null;
  const origin = current.metadata.origin ? h("p", { class: "origin" }, "Made in ", h("code", {}, current.metadata.origin)) : null;

  const history = dataTable([
    { key: "revision", label: "Revision", sort: (r) => r.revision },
    { key: "op", label: "Change" },
    { key: "generation", label: "Generation", sort: (r) => r.generation },
    { key: "at", label: "When", cell: (r) => since(r.at), sort: (r) => r.at },
    { key: "who", label: "Who" },
  ], { caption: "History", empty: "No kept versions.", rowId: (r) => String(r.revision) });
  const from = h("select", { id: "diff-from" });
  const to = h("select", { id: "diff-to" });
  const diffOut = h("div", { class: "diff-out", "aria-live": "polite" });
  const compare = h("button", { type: "button", onclick: () => showDiff() }, "Show the diff");
  const audit = dataTable([
    { key: "at", label: "When", cell: (e) => since(e.at), sort: (e) => e.at },
    { key: "who", label: "Who" },
    { key: "operation", label: "Operation" },
    { key: "generation", label: "Generation", sort: (e) => e.generation },
    { key: "address", label: "From", cell: (e) => e.address || "" },
    { key: "requestId", label: "Request", cell: (e) => e.requestId ? h("code", {}, e.requestId) : "" },
  ], { caption: "Audit", empty: "No audit entries.", rowId: (e) => String(e.revision) });

  const actions = h("div", { class: "toolbar" });
  const where = `${encodeURIComponent(project)}/${plural}/${encodeURIComponent(name)}`;
  if (writable) {
    actions.append(h("a", { class: "button", href: pagePath(project, plural, name, "/edit") }, "Edit"));
    if (FORMS.has(plural)) actions.append(h("a", { class: "button", href: `#/forms/${where}` }, "Guided form"));
    actions.append(h("button", { type: "button", class: "danger", onclick: () => deleteDialog(kind, project, name, path) }, "Delete"));
  }
  if (plural === "applications") {
    actions.append(h("a", { class: "button", href: `#/keys/${encodeURIComponent(project)}/${encodeURIComponent(name)}` }, "Keys"));
  }
  clear(main, h("div", { class: "object-page" },
    h("p", { class: "crumbs" }, link(pagePath(project, plural), `${kind.kind} objects in ${project}`)),
    h("h1", {}, `${kind.kind} `, h("code", {}, name)), origin, gone, actions,
    matrix.el, parents?.el,
    h("h2", {}, "Specification"), yamlView,
    history.el,
    h("div", { class: "toolbar diff-pick" },
      h("div", { class: "field" }, h("label", { for: "diff-from" }, "From revision"), from),
      h("div", { class: "field" }, h("label", { for: "diff-to" }, "To revision"), to),
      compare),
    diffOut,
    audit.el));

  const versions = new Map();
  async function version(revision) {
    if (!versions.has(revision)) versions.set(revision, readYaml(`${path}/history/${revision}`).then((v) => withoutStatus(v.text)));
    return versions.get(revision);
  }

  async function showDiff() {
    if (!from.value || !to.value) return;
    const [a, b] = await Promise.all([version(from.value), version(to.value)]);
    clear(diffOut, diffView(a, b, `Changes from revision ${from.value} to ${to.value}`));
  }

  function revisionOptions(select, items, chosen) {
    const keep = select.value;
    clear(select, items.map((r) => h("option", { value: String(r.revision) }, `${r.revision} · ${r.op} · generation ${r.generation}`)));
    select.value = items.some((r) => String(r.revision) === keep) ? keep : chosen;
  }

  async function loadHistory() {
    const [{ items }, trail] = await Promise.all([
      get(`${path}/history`),
      get(`/v1/audit?project=${encodeURIComponent(project)}&kind=${encodeURIComponent(kind.kind)}&name=${encodeURIComponent(name)}&limit=1000`),
    ]);
    history.update(items);
    const kept = items.filter((r) => r.op !== "delete");
    const first = !from.options.length;
    revisionOptions(from, kept, String(kept[1]?.revision ?? kept[0]?.revision ?? ""));
    revisionOptions(to, kept, String(kept[0]?.revision ?? ""));
    audit.update(trail.items.filter((e) => e.name === name));
    if (first && kept.length > 1) await showDiff();
  }

  async function showSpec() {
    const { text } = await readYaml(path);
    clear(yamlView, withoutStatus(text));
  }

  function show(obj) {
    current = obj;
    matrix.update(obj.status?.clusters || []);
    parents?.update(obj.status?.parents || []);
  }

  show(current);
  await Promise.all([showSpec(), loadHistory()]);
  return watch({
    kind: kind.kind,
    project,
    since: current.metadata.resourceVersion,
    onChange: (change) => {
      if (change.object.metadata.name !== name) return;
      if (change.type === "DELETED") {
        clear(gone, "This object has been deleted.");
        clear(actions);
        loadHistory();
        return;
      }
      const respecified = change.object.metadata.generation !== current.metadata.generation;
      show(change.object);
      if (respecified) { showSpec(); loadHistory(); }
    },
    onReset: async () => { show(await get(path)); showSpec(); loadHistory(); },
  });
}
