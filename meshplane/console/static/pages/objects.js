// Objects of one kind in one project: pick both, search by name, filter by labels (the REST list's
// labelSelector), each with its delivery summary, updated live from /v1/watch.

import { ApiError, listAll, mayWrite } from "../api.js";
import { clear, dataTable, h, link, since } from "../dom.js";
import { watch } from "../live.js";
import { FORMS, deliveryCell, delivery, pagePath, projectKinds, restPath } from "../objects.js";

function picker(id, label, options, selected, onPick) {
  const select = h("select", { id, onchange: () => onPick(select.value) },
    selected ? null : h("option", { value: "" }, "Choose…"),
    options.map(([value, text]) => h("option", { value, selected: value === selected }, text)));
  return h("div", { class: "field" }, h("label", { for: id }, label), select);
}

export async function render(main, { project, plural } = {}) {
  const [projects, kinds] = await Promise.all([listAll("/v1/projects"), projectKinds()]);
  const go = (p, k) => { if (p && k) location.hash = pagePath(p, k); };
  let chosenProject = project || (projects.length === 1 ? projects[0].metadata.name : "");
  const pickers = h("div", { class: "toolbar pickers" },
    picker("object-project", "Project", projects.map((p) => [p.metadata.name, p.metadata.name]), chosenProject, (p) => { chosenProject = p; go(p, plural); }),
    picker("object-kind", "Kind", kinds.map((k) => [k.plural, k.kind]), plural, (k) => go(chosenProject, k)));
  const kind = kinds.find((k) => k.plural === plural);
  if (!project || !kind) {
    clear(main, h("h1", {}, "Objects"), pickers, h("p", {}, "Choose a project and a kind to see its objects."));
    return null;
  }

  const objects = new Map();
  const search = h("input", { id: "object-search", type: "search", placeholder: "name", "aria-label": "Search by name" });
  const selector = h("input", { id: "object-labels", type: "search", placeholder: "team=sales,tier!=free", "aria-label": "Filter by label selector" });
  const problem = h("p", { class: "error", role: "alert" });
  const counts = h("p", { class: "counts", "aria-live": "polite" });
  const table = dataTable([
    { key: "name", label: "Name", cell: (o) => link(pagePath(project, plural, o.metadata.name), o.metadata.name), sort: (o) => o.metadata.name },
    { key: "delivery", label: "Delivery", cell: deliveryCell, sort: (o) => { const d = delivery(o); return d ? d.applied - d.failed * 1000 : -1e9; } },
    { key: "labels", label: "Labels", cell: (o) => Object.entries(o.metadata.labels || {}).map(([k, v]) => h("code", { class: "label" }, `${k}=${v}`)), sort: (o) => JSON.stringify(o.metadata.labels || {}) },
    { key: "generation", label: "Generation", cell: (o) => String(o.metadata.generation ?? ""), sort: (o) => o.metadata.generation ?? 0 },
    { key: "created", label: "Created", cell: (o) => since(o.metadata.creationTimestamp), sort: (o) => o.metadata.creationTimestamp || "" },
  ], { caption: `${kind.kind} objects in ${project}`, empty: `No ${kind.plural} here.`, rowId: (o) => o.metadata.name });

  function refresh() {
    const text = search.value.trim();
    const shown = [...objects.values()].filter((o) => o.metadata.name.includes(text));
    table.update(shown);
    const failing = shown.filter((o) => delivery(o)?.failed).length;
    clear(counts, `${shown.length} ${kind.plural}${failing ? `, ${failing} failing somewhere` : ""}`);
  }

  const seen = {};
  async function load() {
    const query = selector.value.trim() ? `?labelSelector=${encodeURIComponent(selector.value.trim())}` : "";
    clear(problem);
    try {
      const items = await listAll(`${restPath(project, plural)}${query}`, seen);
      objects.clear();
      for (const o of items) objects.set(o.metadata.name, o);
    } catch (error) {
      if (!(error instanceof ApiError) || error.status !== 400) throw error;
      clear(problem, error.message);
      objects.clear();
    }
    refresh();
  }

  let pending = null;
  const reload = () => { clearTimeout(pending); pending = setTimeout(load, 200); };
  search.addEventListener("input", refresh);
  selector.addEventListener("change", load);
  const actions = h("div", { class: "toolbar" });
  if (kind.writable && mayWrite(kind.kind, project)) {
    actions.append(h("a", { class: "button primary", href: `#/create/${encodeURIComponent(project)}/${plural}` }, `New ${kind.kind} (YAML)`));
    if (FORMS.has(plural)) actions.append(h("a", { class: "button", href: `#/forms/${encodeURIComponent(project)}/${plural}` }, `New ${kind.kind} with a form`));
  }
  clear(main, h("h1", {}, "Objects"), pickers, actions, h("div", { class: "toolbar" }, search, selector), problem, counts, table.el);
  await load();
  return watch({
    kind: kind.kind,
    project,
    since: seen.revision ?? null,
    onChange: (change) => {
      const name = change.object.metadata.name;
      if (selector.value.trim()) { reload(); return; }
      if (change.type === "DELETED") objects.delete(name);
      else objects.set(name, change.object);
      refresh();
    },
    onReset: load,
  });
}
