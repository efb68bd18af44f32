// What the object pages share: the kinds REST serves, the paths of objects, YAML reads, delivery summaries.

import { call, get } from "./api.js";
import { h } from "./dom.js";

export const YAML = "application/yaml";

// Kinds with a guided form (their pages live under #/forms/:project/:plural).
export const FORMS = new Set(["apis", "applications", "subscriptions", "ratelimitpolicies"]);

let kindsLoaded = null;

// The project-scoped kinds REST serves: [{kind, plural, namespaced, writable}], from the server's registry.
export async function projectKinds() {
  kindsLoaded ??= get("/ui/kinds.json");
  return (await kindsLoaded).filter((k) => k.namespaced);
}

export async function kindOf(plural) {
  const found = (await projectKinds()).find((k) => k.plural === plural);
  if (!found) throw new Error(`no kind of project objects is called ${plural}`);
  return found;
}

const part = encodeURIComponent;

export function restPath(project, plural, name) {
  return `/v1/projects/${part(project)}/${plural}${name ? `/${part(name)}` : ""}`;
}

export function pagePath(project, plural, name, suffix = "") {
  return `#/objects/${part(project)}/${plural}${name ? `/${part(name)}` : ""}${suffix}`;
}

// An object (or a kept version of it) as the server writes it in YAML, with its ETag.
export async function readYaml(path) {
  const answer = await call("GET", path, undefined, { headers: { Accept: YAML }, raw: true });
  return { text: await answer.text(), etag: answer.headers.get("ETag") };
}

// The YAML without its status: the server writes `status` last and at the top level, so it starts at the one
// line that reads "status:" from the first column (nested keys are indented, multi-line strings too).
export function withoutStatus(text) {
  const at = text.search(/^status:/m);
  return at < 0 ? text : text.slice(0, at);
}

// "Applied n/m" over the placed clusters, and how many failed; null for a kind that is not delivered.
export function delivery(obj) {
  const clusters = obj.status?.clusters;
  if (!clusters || !clusters.length) return null;
  const applied = clusters.filter((c) => c.state === "Applied").length;
  const failed = clusters.filter((c) => c.state === "Failed").length;
  return { applied, failed, total: clusters.length };
}

export function deliveryCell(obj) {
  const d = delivery(obj);
  if (!d) return h("span", { class: "muted" }, "—");
  return h("span", { class: "delivery" },
    h("span", { class: `badge ${d.applied === d.total ? "good" : "warn"}` }, `Applied ${d.applied}/${d.total}`),
    d.failed ? h("span", { class: "badge bad" }, `${d.failed} Failed`) : null);
}
