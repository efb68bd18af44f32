// An Application's guided form: what it is and who owns it; its keys are on its keys page, never in the spec.
// Client ids and client certificates are kept as they were.

import { h } from "../../dom.js";
import { field, textInput, textOf } from "../../forms.js";

export const kind = "Application";

export function fields({ spec }) {
  const description = textInput(spec.description);
  const owner = textInput(spec.owner, { placeholder: "team-shop@example.com" });
  return {
    el: [field("Description", "spec.description", description), field("Owner", "spec.owner", owner)],
    read: () => ({ description: description.value.trim(), owner: textOf(owner) }),
  };
}

export function after({ project, existing }) {
  const href = `#/keys/${encodeURIComponent(project)}/${encodeURIComponent(existing.metadata.name)}`;
  return h("p", {}, h("a", { href }, "API keys of this application"));
}
