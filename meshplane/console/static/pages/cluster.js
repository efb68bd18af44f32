// One cluster: its status and, for fleet-wide roles, what it receives with each object's state there.

import { ApiError, get, session } from "../api.js";
import { badge, clear, dataTable, h, since } from "../dom.js";
import { watch } from "../live.js";
import { health } from "./fleet.js";

const PLURALS = {
  "meshplane.v1.API": "apis", "meshplane.v1.Application": "applications", "meshplane.v1.Subscription": "subscriptions",
  "meshplane.v1.RateLimitPolicy": "ratelimitpolicies", "meshplane.v1.Gateway": "gateways",
  "meshplane.v1.TLSCertificate": "tlscertificates",
};

function pluralOf(typeUrl) {
  return PLURALS[typeUrl.split("/").pop()] || null;
}

export async function render(main, { name }) {
  const cluster = await get(`/v1/clusters/${encodeURIComponent(name)}`);
  const status = cluster.status || {};
  const facts = h("dl", { class: "facts" },
    h("dt", {}, "Health"), h("dd", {}, badge(health(cluster))),
    h("dt", {}, "Last seen"), h("dd", {}, since(status.lastSeen)),
    h("dt", {}, "Agent version"), h("dd", {}, status.agentVersion || "—"),
    h("dt", {}, "Out of date"), h("dd", {}, String(status.outOfDate ?? 0)),
    h("dt", {}, "Last error"), h("dd", {}, status.lastError || "none"),
  );
  const heading = h("h1", {}, "Cluster ", h("code", {}, name));
  if (session.principal?.project) {
    clear(main, heading, facts, h("p", {}, "What this cluster receives is shown to fleet-wide roles only."));
    return null;
  }
  const rows = new Map();
  const table = dataTable([
    { key: "object", label: "Object", cell: (r) => r.href ? h("a", { href: r.href }, r.label) : r.label, sort: (r) => r.label },
    { key: "state", label: "State", cell: (r) => badge(r.state), sort: (r) => r.state },
    { key: "version", label: "Version", cell: (r) => h("code", {}, r.version.slice(0, 12)) },
    { key: "since", label: "Since", cell: (r) => since(r.since), sort: (r) => r.since || "" },
    { key: "message", label: "Message", cell: (r) => r.message || "" },
  ], { caption: "What it receives", empty: "Nothing is placed on this cluster.", rowId: (r) => r.key });
  clear(main, heading, facts, table.el);

  async function load() {
    const { items } = await get(`/v1/clusters/${encodeURIComponent(name)}/resources`);
    rows.clear();
    await Promise.all(items.map(async (item) => {
      const meta = item.object.metadata || {};
      const plural = pluralOf(item.typeUrl);
      const row = { key: `${item.typeUrl}/${item.name}`, label: `${item.object.kind} ${item.name}`, state: "Pending", version: item.version, message: "", since: null, href: null };
      if (plural && meta.project) {
        row.href = `#/objects/${encodeURIComponent(meta.project)}/${plural}/${encodeURIComponent(meta.name)}`;
        try {
          const obj = await get(`/v1/projects/${encodeURIComponent(meta.project)}/${plural}/${encodeURIComponent(meta.name)}`);
          const entry = (obj.status?.clusters || []).find((e) => e.cluster === name);
          if (entry) Object.assign(row, { state: entry.state, message: entry.message || "", since: entry.lastTransitionTime });
        } catch (error) {
          if (!(error instanceof ApiError)) throw error;
        }
      } else {
        row.state = "Applied";
      }
      rows.set(row.key, row);
    }));
    table.update([...rows.values()]);
  }

  await load();
  let pending = null;
  return watch({
    onChange: () => {
      clearTimeout(pending);
      pending = setTimeout(load, 200);
    },
    onReset: load,
  });
}
