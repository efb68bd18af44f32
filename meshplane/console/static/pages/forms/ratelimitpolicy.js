// A rate-limit policy's guided form: what it limits (an API, one operation of an API, or each subscription of a
// plan) and how many requests per unit.

import { listAll } from "../../api.js";
import { h } from "../../dom.js";
import { choice, errorSlot, field, numberInput, numberOf, textInput, textOf } from "../../forms.js";

export const kind = "RateLimitPolicy";

const TARGETS = [["API", "An API"], ["Operation", "One operation of an API"], ["SubscriptionPlan", "Each subscription of a plan"]];
const UNITS = ["second", "minute", "hour", "day"].map((u) => [u, `per ${u}`]);
const SCOPES = [["global", "Global: all gateways share one count"], ["local", "Local: each gateway counts alone"]];
const METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"].map((m) => [m, m]);

export async function fields({ project, spec }) {
  const target = spec.target || {};
  const apis = await listAll(`/v1/projects/${encodeURIComponent(project)}/apis`);
  const known = h("datalist", { id: "ratelimit-apis" }, apis.map((api) => h("option", { value: api.metadata.name })));
  const targetKind = choice(TARGETS, target.kind || "API");
  const name = textInput(target.name, { spellcheck: "false" });
  const onApi = textInput(target.api, { spellcheck: "false", list: "ratelimit-apis" });
  const method = choice(METHODS, target.operation?.method || "GET");
  const path = textInput(target.operation?.path, { placeholder: "/items", spellcheck: "false" });
  const operation = h("div", { class: "cols" },
    field("Operation method", "spec.target.operation.method", method), field("Operation path", "spec.target.operation.path", path));
  const narrowing = field("Only on API", "spec.target.api", onApi, "optional: the plan's subscriptions to this API only");
  const nameLabel = h("span", {});
  const show = () => {
    operation.hidden = targetKind.value !== "Operation";
    narrowing.hidden = targetKind.value !== "SubscriptionPlan";
    const plan = targetKind.value === "SubscriptionPlan";
    nameLabel.textContent = plan ? "Plan" : "API";
    if (plan) name.removeAttribute("list");
    else name.setAttribute("list", "ratelimit-apis");
  };
  const nameField = field(nameLabel, "spec.target.name", name);
  targetKind.addEventListener("change", show);
  show();
  const requests = numberInput(spec.requestsPerUnit);
  const unit = choice(UNITS, spec.unit || "minute");
  const scope = choice(SCOPES, spec.scope || "global");
  return {
    el: [
      h("fieldset", {}, h("legend", {}, "Target"), errorSlot("spec.target"), known, field("Target kind", "spec.target.kind", targetKind), nameField, operation, narrowing),
      h("fieldset", {}, h("legend", {}, "Limit"), h("div", { class: "cols" },
        field("Requests", "spec.requestsPerUnit", requests), field("Unit", "spec.unit", unit), field("Counted", "spec.scope", scope))),
    ],
    read() {
      const read = { kind: targetKind.value, name: name.value.trim() };
      if (targetKind.value === "Operation") read.operation = { method: method.value, path: path.value.trim() };
      if (targetKind.value === "SubscriptionPlan" && textOf(onApi)) read.api = textOf(onApi);
      return { target: read, requestsPerUnit: numberOf(requests), unit: unit.value, scope: scope.value };
    },
  };
}
