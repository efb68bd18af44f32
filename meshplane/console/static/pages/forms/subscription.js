// A Subscription's guided form: which application may call which API, on which plan, active or blocked.

import { listAll } from "../../api.js";
import { h } from "../../dom.js";
import { choice, field, formHref, textInput } from "../../forms.js";

export const kind = "Subscription";

async function names(project, plural) {
  const items = await listAll(`/v1/projects/${encodeURIComponent(project)}/${plural}`);
  return items.map((item) => item.metadata.name).sort();
}

// The project's objects of one kind to pick from, keeping a current choice that no longer exists.
function picker(options, current) {
  const all = current && !options.includes(current) ? [current, ...options] : options;
  return choice([["", "Choose…"], ...all.map((n) => [n, n])], current || "");
}

// A new subscription's name, until one is typed: <application>-<api>.
function suggest(nameInput, application, api) {
  let last = nameInput.value;
  const update = () => {
    if (nameInput.value !== last || !application.value || !api.value) return;
    nameInput.value = last = `${application.value}-${api.value}`;
  };
  application.addEventListener("change", update);
  api.addEventListener("change", update);
}

// A way to the form that makes the first one, when the project has none to pick from.
function missing(options, project, plural, noun) {
  if (options.length) return undefined;
  return h("span", {}, `This project has no ${noun} yet: `, h("a", { href: formHref(project, plural) }, `make one first`), ".");
}

export async function fields({ project, spec, existing, nameInput }) {
  const [applications, apis] = await Promise.all([names(project, "applications"), names(project, "apis")]);
  const application = picker(applications, spec.application);
  const api = picker(apis, spec.api);
  const plan = textInput(spec.plan ?? "default", { spellcheck: "false" });
  const state = choice([["active", "Active"], ["blocked", "Blocked"]], spec.state || "active");
  if (!existing) suggest(nameInput, application, api);
  return {
    el: h("div", { class: "cols" },
      field("Application", "spec.application", application, missing(applications, project, "applications", "application")),
      field("API", "spec.api", api, missing(apis, project, "apis", "API")),
      field("Plan", "spec.plan", plan),
      field("State", "spec.state", state)),
    read: () => ({ application: application.value, api: api.value, plan: plan.value.trim(), state: state.value }),
  };
}
