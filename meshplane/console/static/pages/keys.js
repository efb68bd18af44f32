// An application's API keys: the list (never the keys themselves), a new key shown once, revoking with
// confirmation. A new key lives only in this page's read-only field: it is not stored anywhere in the browser,
// and the server never returns it again, so leaving the page loses it for good.

import { ApiError, call, get, mayWrite } from "../api.js";
import { badge, clear, dataTable, h, since, toast } from "../dom.js";
import { confirmAction, formHref } from "../forms.js";

function state(key) {
  if (key.revoked) return "Revoked";
  if (key.expires && Date.parse(key.expires) <= Date.now()) return "Expired";
  return "Active";
}

// The one showing of a new key, with a button that copies it.
function shown(key) {
  const field = h("input", { id: "new-key", type: "text", readonly: true, value: key, spellcheck: "false", autocomplete: "off", "aria-describedby": "new-key-note" });
  const status = h("span", { class: "hint", role: "status" });
  const copy = h("button", { type: "button", class: "primary", onclick: async () => {
    try {
      await navigator.clipboard.writeText(field.value);
      clear(status, "Copied.");
    } catch {
      field.select();
      clear(status, "Copying is not allowed here: the key is selected, copy it with the keyboard.");
    }
  } }, "Copy");
  return h("section", { class: "new-key", "aria-labelledby": "new-key-title" },
    h("h2", { id: "new-key-title" }, "New key"),
    h("p", { id: "new-key-note", class: "note warn" }, "Copy this key now: it will not be shown again."),
    h("label", { for: "new-key" }, "New key"),
    h("div", { class: "toolbar" }, field, copy, status));
}

export async function render(main, { project, name }) {
  const base = `/v1/projects/${encodeURIComponent(project)}/applications/${encodeURIComponent(name)}/keys`;
  const writer = mayWrite("Application", project);
  const once = h("div", {});
  const alert = h("div", { class: "error", role: "alert" });
  const table = dataTable([
    { key: "id", label: "Key", cell: (k) => h("code", {}, k.id) },
    { key: "kind", label: "Kind" },
    { key: "created", label: "Created", cell: (k) => since(k.created), sort: (k) => k.created },
    { key: "expires", label: "Expires", cell: (k) => k.expires || "never", sort: (k) => k.expires || "~" },
    { key: "state", label: "State", cell: (k) => badge(state(k)), sort: state },
    ...(writer ? [{ key: "action", label: "Action", sort: state, cell: (k) => k.revoked ? "" :
      h("button", { type: "button", class: "danger", "aria-label": `Revoke key ${k.id}`, onclick: () => revoke(k) }, "Revoke") }] : []),
  ], { caption: "Keys", empty: "This application has no keys yet.", rowId: (k) => k.id });

  async function load() {
    const { items } = await get(base);
    table.update(items);
  }

  async function revoke(key) {
    const sure = await confirmAction(`Revoke key ${key.id} of ${name}? Every gateway refuses it from the next push; this cannot be undone.`, "Revoke key");
    if (!sure) return;
    try {
      await call("DELETE", `${base}/${encodeURIComponent(key.id)}`);
      toast(`Revoked key ${key.id}.`);
      await load();
    } catch (failure) {
      if (!(failure instanceof ApiError)) throw failure;
      clear(alert, failure.message);
    }
  }

  async function issue() {
    clear(alert);
    try {
      const made = await call("POST", base, {});
      clear(once, shown(made.key));
      once.querySelector("input").focus();
      await load();
    } catch (failure) {
      if (!(failure instanceof ApiError)) throw failure;
      clear(alert, failure.message);
    }
  }

  await load();
  clear(main,
    h("p", { class: "crumbs" }, h("a", { href: formHref(project, "applications", name) }, `${project} / applications / ${name}`)),
    h("h1", {}, "API keys of ", h("code", {}, name)),
    writer ? h("div", { class: "toolbar" }, h("button", { type: "button", class: "primary", onclick: issue }, "New key")) : null,
    alert,
    once,
    table.el,
  );
  return () => clear(once);
}
