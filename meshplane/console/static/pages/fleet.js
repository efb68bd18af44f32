// The fleet: every cluster with its health, sortable, filterable by name and labels, updated live.

import { listAll, session } from "../api.js";
import { badge, clear, dataTable, h, link, since } from "../dom.js";
import { watch } from "../live.js";

export function health(cluster) {
  const s = cluster.status || {};
  const mine = session.principal?.project ? s.byProject?.[session.principal.project] || {} : s;
  if (!s.connected) return "Disconnected";
  if (mine.lastError) return "Failed";
  if (mine.outOfDate) return "Pending";
  return "Connected";
}

function matches(cluster, text) {
  if (!text) return true;
  const labels = cluster.metadata.labels || {};
  return text.split(/[\s,]+/).filter(Boolean).every((term) => {
    const [key, value] = term.split("=");
    if (value !== undefined) return labels[key] === value;
    return cluster.metadata.name.includes(term) || Object.entries(labels).some(([k, v]) => `${k}=${v}`.includes(term));
  });
}

function summary(cluster) {
  const s = cluster.status || {};
  return session.principal?.project ? s.byProject?.[session.principal.project] || {} : s;
}

export async function render(main) {
  const clusters = new Map();
  const filter = h("input", { id: "cluster-filter", type: "search", placeholder: "name or label=value", "aria-label": "Filter clusters by name or label" });
  const counts = h("p", { class: "counts", "aria-live": "polite" });
  const table = dataTable([
    { key: "name", label: "Cluster", cell: (c) => link(`#/clusters/${encodeURIComponent(c.metadata.name)}`, c.metadata.name), sort: (c) => c.metadata.name },
    { key: "health", label: "Health", cell: (c) => badge(health(c)), sort: (c) => health(c) },
    { key: "lastSeen", label: "Last seen", cell: (c) => since(c.status?.lastSeen), sort: (c) => c.status?.lastSeen || "" },
    { key: "agent", label: "Agent", cell: (c) => c.status?.agentVersion || "—" },
    { key: "outOfDate", label: "Out of date", cell: (c) => String(summary(c).outOfDate ?? 0), sort: (c) => summary(c).outOfDate ?? 0 },
    { key: "lag", label: "Behind since", cell: (c) => since(summary(c).behindSince), sort: (c) => summary(c).behindSince || "" },
    { key: "error", label: "Last error", cell: (c) => summary(c).lastError || "" },
    { key: "labels", label: "Labels", cell: (c) => Object.entries(c.metadata.labels || {}).map(([k, v]) => h("code", { class: "label" }, `${k}=${v}`)), sort: (c) => JSON.stringify(c.metadata.labels || {}) },
  ], { caption: "Clusters", empty: "No cluster has registered yet.", rowId: (c) => c.metadata.name });

  function refresh() {
    const shown = [...clusters.values()].filter((c) => matches(c, filter.value.trim()));
    table.update(shown);
    const connected = shown.filter((c) => c.status?.connected).length;
    clear(counts, `${shown.length} clusters, ${connected} connected, ${shown.filter((c) => health(c) === "Failed").length} failing`);
  }

  filter.addEventListener("input", refresh);
  clear(main, h("h1", {}, "Fleet"), h("div", { class: "toolbar" }, filter), counts, table.el);
  const page = await listAll("/v1/clusters");
  for (const cluster of page) clusters.set(cluster.metadata.name, cluster);
  refresh();
  return watch({
    kind: "Cluster",
    onChange: (change) => {
      if (change.type === "DELETED") clusters.delete(change.object.metadata.name);
      else clusters.set(change.object.metadata.name, change.object);
      refresh();
    },
    onReset: async () => {
      clusters.clear();
      for (const cluster of await listAll("/v1/clusters")) clusters.set(cluster.metadata.name, cluster);
      refresh();
    },
  });
}
