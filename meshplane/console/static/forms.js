// The parts of every guided form: labelled controls that each know the field path the server names in its
// problem+json errors (`spec.backends[0].port`), so each error is shown at the control it is about; lists of
// rows (operations, backends) to add to and remove from; and a confirmation dialog.

import { clear, h } from "./dom.js";

let serial = 0;

// Where the guided form of a new object of `plural` (or of the object `name`) is.
export function formHref(project, plural, name) {
  return `#/forms/${encodeURIComponent(project)}/${plural}${name ? `/${encodeURIComponent(name)}` : ""}`;
}

// An error the form finds before sending anything, in the server's own shape.
export class FormErrors extends Error {
  constructor(errors) {
    super("the form has errors");
    this.errors = errors;
  }
}

// Where the errors of `path` (and of the fields below it that have no slot of their own) are shown.
export function errorSlot(path) {
  return h("p", { class: "field-error", id: `error-${++serial}`, "data-error-for": path, hidden: true });
}

// A control with its label, an optional hint and the slot of its field's errors.
export function field(label, path, control, hint) {
  const id = `field-${++serial}`;
  const slot = errorSlot(path);
  const help = hint ? h("p", { class: "hint", id: `${id}-hint` }, hint) : null;
  control.id = id;
  control.dataset.path = path;
  control.setAttribute("aria-describedby", [help?.id, slot.id].filter(Boolean).join(" "));
  return h("div", { class: "field" }, h("label", { for: id }, label), control, help, slot);
}

// A checkbox with its label after it.
export function checkbox(label, path, checked) {
  const id = `field-${++serial}`;
  const slot = errorSlot(path);
  const box = h("input", { type: "checkbox", id, checked: Boolean(checked), "data-path": path, "aria-describedby": slot.id });
  return { box, el: h("div", { class: "field check" }, box, h("label", { for: id }, label), slot) };
}

export function textInput(value, attrs = {}) {
  return h("input", { type: "text", value: value ?? "", autocomplete: "off", ...attrs });
}

export function numberInput(value, attrs = {}) {
  return h("input", { type: "number", inputmode: "numeric", value: value ?? "", ...attrs });
}

// A <select> of `options` ([value, text] pairs) with `value` chosen.
export function choice(options, value) {
  return h("select", {}, options.map(([v, text]) => h("option", { value: v, selected: v === value }, text)));
}

// The number typed, or undefined (left out of the document) when the field is empty.
export function numberOf(input) {
  return input.value.trim() === "" ? undefined : Number(input.value);
}

export function textOf(input) {
  return input.value.trim() || undefined;
}

// "a, b c" as ["a", "b", "c"].
export function listOf(input) {
  return input.value.split(/[\s,]+/).filter(Boolean);
}

// Labels typed as "key=value, key=value"; a term without "=" is an error at `path`.
export function labelsOf(input, path = "metadata.labels") {
  const labels = {};
  for (const term of listOf(input)) {
    const at = term.indexOf("=");
    if (at < 1) throw new FormErrors([{ path, message: `${term}: write each label as key=value` }]);
    labels[term.slice(0, at)] = term.slice(at + 1);
  }
  return labels;
}

export function labelsText(labels) {
  return Object.entries(labels || {}).map(([k, v]) => `${k}=${v}`).join(", ");
}

// Rows of one list field (`path`, e.g. spec.backends), each drawn by `make(value, rowPath)` → {el, read()};
// `blank()` is a new row's value. Removing a row draws the rest again, so each keeps its index's path.
export function rowList({ legend, hint, item, path, add, values, make, blank }) {
  let rows = [];
  const list = h("div", { class: "rows" });
  const read = () => rows.map((row) => row.read());

  function draw(items) {
    rows = items.map((value, index) => make(value, `${path}[${index}]`));
    clear(list, rows.map((row, index) => h("fieldset", { class: "row" },
      h("legend", {}, `${item} ${index + 1}`),
      row.el,
      h("button", { type: "button", class: "danger", "aria-label": `Remove ${item.toLowerCase()} ${index + 1}`, onclick: () => {
        const left = read();
        left.splice(index, 1);
        draw(left);
      } }, "Remove"),
    )));
  }

  const adder = h("button", { type: "button", onclick: () => {
    draw([...read(), blank()]);
    list.lastElementChild?.querySelector("input, select")?.focus();
  } }, add);
  draw(values);
  const help = hint ? h("p", { class: "hint" }, hint) : null;
  return { el: h("fieldset", { class: "rowlist" }, h("legend", {}, legend), help, errorSlot(path), list, adder), read };
}

function covers(slotPath, path) {
  return path === slotPath || path.startsWith(`${slotPath}.`) || path.startsWith(`${slotPath}[`);
}

export function clearErrors(form) {
  for (const slot of form.querySelectorAll("[data-error-for]")) {
    clear(slot);
    slot.hidden = true;
  }
  for (const control of form.querySelectorAll("[aria-invalid]")) control.removeAttribute("aria-invalid");
}

// Show each {path, message} at the slot of its field or, failing that, of the nearest enclosing field; returns
// those no slot covers. The first field in error takes the focus.
export function showErrors(form, errors) {
  clearErrors(form);
  const slots = [...form.querySelectorAll("[data-error-for]")];
  const unplaced = [];
  let first = null;
  for (const error of errors) {
    const slot = slots.filter((s) => covers(s.dataset.errorFor, error.path))
      .sort((a, b) => b.dataset.errorFor.length - a.dataset.errorFor.length)[0];
    if (!slot) {
      unplaced.push(error);
      continue;
    }
    const where = slot.dataset.errorFor === error.path ? "" : `${error.path.slice(slot.dataset.errorFor.length).replace(/^\./, "")}: `;
    slot.append(h("span", {}, `${where}${error.message}`));
    slot.hidden = false;
    const control = [...form.querySelectorAll("[data-path]")].find((c) => c.dataset.path === slot.dataset.errorFor);
    control?.setAttribute("aria-invalid", "true");
    first ??= control || slot;
  }
  if (first?.focus) first.focus();
  return unplaced;
}

// Ask before an action that cannot be undone; resolves true when the user confirms.
export function confirmAction(question, action) {
  return new Promise((resolve) => {
    const dialog = h("dialog", { "aria-labelledby": `confirm-${++serial}` });
    const done = (answer) => {
      dialog.close();
      dialog.remove();
      resolve(answer);
    };
    dialog.append(
      h("p", { id: `confirm-${serial}` }, question),
      h("div", { class: "toolbar" },
        h("button", { type: "button", class: "danger", onclick: () => done(true) }, action),
        h("button", { type: "button", autofocus: true, onclick: () => done(false) }, "Cancel")),
    );
    dialog.addEventListener("cancel", () => done(false));
    document.body.append(dialog);
    dialog.showModal();
  });
}
