// A guided form for one kind of object: `#/forms/<project>/<plural>` makes a new one, `.../<name>` edits it.
// The document goes through the REST API as any client's would (POST to create, so an existing object is never
// replaced unawares; PUT with its resourceVersion to edit, so a change made meanwhile is not overwritten), and
// the server's field errors are shown at their fields. Roles the server would refuse get no form.

import { ApiError, call, get, mayWrite, session } from "../api.js";
import { clear, h, toast } from "../dom.js";
import { FormErrors, clearErrors, field, formHref, labelsOf, labelsText, showErrors, textInput } from "../forms.js";
import * as api from "./forms/api.js";
import * as application from "./forms/application.js";
import * as ratelimitpolicy from "./forms/ratelimitpolicy.js";
import * as subscription from "./forms/subscription.js";

// plural → {kind, fields(context) → {el, read() → spec fields}, after?(context) → node}
const FORMS = { apis: api, applications: application, subscriptions: subscription, ratelimitpolicies: ratelimitpolicy };

const path = (project, plural, name) =>
  `/v1/projects/${encodeURIComponent(project)}/${plural}${name ? `/${encodeURIComponent(name)}` : ""}`;

// Whether the object now stands at another revision than the one the form was drawn from.
async function changedSince(where, existing) {
  const now = await get(where).catch(() => null);
  return now?.metadata.resourceVersion !== existing.metadata.resourceVersion;
}

export async function render(main, { project, plural, name }) {
  const form = FORMS[plural];
  if (!form) {
    clear(main, h("h1", {}, "No guided form"), h("p", {}, `There is no guided form for ${plural}.`));
    return null;
  }
  const title = `${name ? "Edit" : "New"} ${form.kind}`;
  if (!mayWrite(form.kind, project)) {
    const p = session.principal;
    clear(main, h("h1", {}, title),
      h("p", { class: "note" }, `As ${p.role}${p.project ? ` of ${p.project}` : ""} you cannot change ${form.kind} objects in ${project}.`));
    return null;
  }
  const existing = name ? await get(path(project, plural, name)) : null;
  const nameInput = textInput(name, { required: true, readonly: Boolean(name), spellcheck: "false" });
  const context = { project, existing, spec: existing?.spec || {}, nameInput };
  const labelsInput = textInput(labelsText(existing?.metadata.labels), { placeholder: "team=shop, tier=gold" });
  const parts = await form.fields(context);
  const alert = h("div", { class: "error", role: "alert" });
  const el = h("form", { class: "guided", novalidate: true, "aria-labelledby": "form-title" },
    field("Name", "metadata.name", nameInput),
    parts.el,
    field("Labels", "metadata.labels", labelsInput, "key=value pairs, separated by commas"),
    alert,
    h("div", { class: "toolbar" }, h("button", { type: "submit", class: "primary" }, name ? "Save" : `Create ${form.kind}`)),
  );

  el.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors(el);
    clear(alert);
    const button = el.querySelector("button[type=submit]");
    button.disabled = true;
    try {
      const metadata = { ...(existing?.metadata || {}), name: nameInput.value.trim(), labels: labelsOf(labelsInput) };
      const spec = { ...context.spec, ...parts.read() };
      for (const [key, value] of Object.entries(spec)) if (value === undefined) delete spec[key];
      const doc = { apiVersion: existing?.apiVersion, kind: form.kind, metadata: { ...metadata, project }, spec };
      const saved = name ? await call("PUT", path(project, plural, name), doc) : await call("POST", path(project, plural), doc);
      toast(`Saved ${form.kind} ${saved.metadata.name}.`);
      if (name) {
        await render(main, { project, plural, name });
      } else {
        location.hash = formHref(project, plural, saved.metadata.name);
      }
    } catch (failure) {
      const local = failure instanceof FormErrors;
      const conflict = failure instanceof ApiError && failure.status === 409;
      const changed = conflict && name && await changedSince(path(project, plural, name), existing);
      let errors = local ? failure.errors : failure instanceof ApiError ? failure.fieldErrors : [];
      if (conflict && !name) errors = [{ path: "metadata.name", message: `${failure.message}: choose another name, or edit that one.` }];
      const unplaced = showErrors(el, errors);
      const reload = h("button", { type: "button", onclick: () => render(main, { project, plural, name }) }, "Reload");
      clear(alert,
        local ? null : h("p", {}, `Nothing was saved: ${failure.message}.`),
        changed ? h("p", {}, "It was changed since this page was loaded. ", reload, " to see the change, then edit again.") : null,
        unplaced.map((e) => h("p", {}, `${e.path}: ${e.message}`)));
    } finally {
      button.disabled = false;
    }
  });

  clear(main,
    h("p", { class: "crumbs" }, h("a", { href: `#/objects/${encodeURIComponent(project)}/${plural}` }, `${project} / ${plural}`)),
    h("h1", { id: "form-title" }, title, name ? [" ", h("code", {}, name)] : null),
    el,
    existing && form.after ? form.after(context) : null,
  );
  (name ? el.querySelector("input:not([readonly]), select") : nameInput).focus();
  return null;
}
