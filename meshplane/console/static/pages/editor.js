// Create or edit an object as YAML: the server parses and validates it (the browser has no YAML library);
// a diff against the stored version comes before saving, and the server's field errors show beside the
// editor, each naming its field, with nothing stored.

import { ApiError, call, mayWrite } from "../api.js";
import { clear, h, link, toast } from "../dom.js";
import { diffView } from "../diff.js";
import { YAML, kindOf, pagePath, readYaml, restPath, withoutStatus } from "../objects.js";

// What a user's write owns of the YAML: all but the version line (the status is cut off already).
function userOwned(text) {
  return text.replace(/^ {2}resourceVersion: .*\n/m, "");
}

function template(kind, project) {
  return `apiVersion: meshplane.io/v1alpha1\nkind: ${kind.kind}\nmetadata:\n  name: \n  project: ${project}\n  labels: {}\nspec: {}\n`;
}

export async function render(main, { project, plural, name }) {
  const kind = await kindOf(plural);
  const heading = name ? h("h1", {}, `Edit ${kind.kind} `, h("code", {}, name)) : h("h1", {}, `New ${kind.kind} in ${project}`);
  const back = h("p", { class: "crumbs" }, name ? link(pagePath(project, plural, name), `Back to ${kind.kind} ${name}`) : link(pagePath(project, plural), `${kind.kind} objects in ${project}`));
  if (!kind.writable || !mayWrite(kind.kind, project)) {
    clear(main, back, heading, h("p", { class: "error" }, `Your role may not change ${kind.kind} objects in ${project}.`));
    return null;
  }
  let stored = "", etag = null;
  async function loadStored() {
    const read = await readYaml(restPath(project, plural, name));
    stored = withoutStatus(read.text);
    etag = read.etag;
  }
  if (name) await loadStored();

  const editor = h("textarea", { id: "yaml-editor", spellcheck: "false", autocomplete: "off", "aria-describedby": "editor-errors" });
  editor.value = name ? stored : template(kind, project);
  const errors = h("div", { id: "editor-errors", class: "editor-errors" });
  const review = h("div", { class: "review", "aria-live": "polite" });
  const reviewButton = h("button", { type: "button", class: "primary" }, "Review changes");
  const save = h("button", { type: "button", class: "primary", hidden: true }, "Save");
  const reloadStored = h("button", { type: "button", hidden: true }, "Review against the stored version now");

  function showReview() {
    clear(errors);
    clear(review, h("h2", {}, name ? "Changes to the stored version" : "The new object"), diffView(stored, editor.value, "Changes before saving"));
    save.hidden = false;
    save.focus();
  }

  // The PUT, guarded by the version reviewed. Status updates (clusters reporting) change that version too;
  // when nothing but those changed since, the write goes ahead on the newer version, else the 409 stands.
  async function replace() {
    for (let attempt = 0; ; attempt++) {
      try {
        return await call("PUT", restPath(project, plural, name), editor.value, { headers: { "Content-Type": YAML, "If-Match": etag } });
      } catch (error) {
        const reviewed = stored;
        if (!(error instanceof ApiError) || error.status !== 409 || attempt >= 3) throw error;
        await loadStored();
        if (userOwned(stored) !== userOwned(reviewed)) throw error;
      }
    }
  }

  async function submit() {
    clear(errors);
    save.disabled = true;
    try {
      const saved = name ? await replace() : await call("POST", restPath(project, plural), editor.value, { headers: { "Content-Type": YAML } });
      toast(`${kind.kind} ${saved.metadata.name} saved (generation ${saved.metadata.generation}).`);
      location.hash = pagePath(project, plural, saved.metadata.name);
    } catch (error) {
      if (!(error instanceof ApiError)) throw error;
      clear(errors, fieldErrorsFor(error));
      reloadStored.hidden = error.status !== 409 || !name;
      save.hidden = true;
    } finally {
      save.disabled = false;
    }
  }

  function fieldErrorsFor(error) {
    const list = error.fieldErrors;
    return h("div", { class: "field-errors", role: "alert" },
      h("p", { class: "error" }, error.status === 409 ? `Not saved: ${error.message}` : `Not saved (nothing was stored): ${error.message}`),
      list.length ? h("ul", {}, list.map((e) => h("li", { class: "field-error", "data-path": e.path }, h("code", {}, e.path || "(the document)"), `: ${e.message}`))) : null);
  }

  editor.addEventListener("input", () => { save.hidden = true; clear(review); });
  reviewButton.addEventListener("click", showReview);
  save.addEventListener("click", submit);
  reloadStored.addEventListener("click", async () => {
    await loadStored();
    reloadStored.hidden = true;
    showReview();
  });
  clear(main, back, heading,
    h("div", { class: "editor" },
      h("div", { class: "editor-text" }, h("label", { for: "yaml-editor" }, `${kind.kind} (YAML)`), editor),
      errors),
    h("div", { class: "toolbar" }, reviewButton, save, reloadStored),
    review);
  editor.focus();
  return null;
}
