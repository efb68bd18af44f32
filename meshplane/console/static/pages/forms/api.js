// An API's guided form: base path, operations, backends and how callers authenticate. Fields it does not show
// (timeouts, shaping, a backend's health check, a JWT's key set...) are kept as they were. An API attached to
// Gateway API routes (targetRefs) has no traffic of its own: its form names the routes and edits how callers
// authenticate; the routes themselves are edited as YAML.

import { h } from "../../dom.js";
import { checkbox, choice, errorSlot, field, listOf, numberInput, numberOf, rowList, textInput, textOf } from "../../forms.js";

export const kind = "API";

const METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"].map((m) => [m, m]);
const CREDENTIALS = [["none", "None: anyone may call"], ["apiKey", "API key (applications)"], ["jwt", "JWT (user tokens)"]];

function operation(value, at) {
  const method = choice(METHODS, value.method || "GET");
  const path = textInput(value.path, { placeholder: "/items/{id}", spellcheck: "false" });
  return {
    el: h("div", { class: "cols" }, field("Method", `${at}.method`, method), field("Path", `${at}.path`, path)),
    read: () => ({ ...value, method: method.value, path: path.value.trim() }),
  };
}

function backend(value, at) {
  const host = textInput(value.host, { placeholder: "orders.internal", spellcheck: "false" });
  const port = numberInput(value.port);
  const weight = numberInput(value.weight ?? 100);
  const tls = checkbox("TLS to the backend", `${at}.tls`, value.tls);
  return {
    el: h("div", { class: "cols" },
      field("Host", `${at}.host`, host), field("Port", `${at}.port`, port), field("Weight", `${at}.weight`, weight), tls.el),
    read() {
      const { tls: previous, ...rest } = value;
      const read = { ...rest, host: textOf(host), port: numberOf(port), weight: numberOf(weight) };
      return tls.box.checked ? { ...read, tls: previous || {} } : read;
    },
  };
}

function authentication(auth, { mtlsAllowed = true } = {}) {
  const base = "spec.authentication";
  const which = choice(CREDENTIALS, auth?.apiKey ? "apiKey" : auth?.jwt ? "jwt" : "none");
  const header = textInput(auth?.apiKey?.header ?? "x-api-key", { spellcheck: "false" });
  const mode = choice([["signed", "Signed (checked by every gateway)"], ["opaque", "Opaque (checked by the enforcer)"]], auth?.apiKey?.mode || "signed");
  const issuer = textInput(auth?.jwt?.issuer, { placeholder: "https://login.example.com", spellcheck: "false" });
  const audiences = textInput((auth?.jwt?.audiences || []).join(", "), { spellcheck: "false" });
  const jwksUri = textInput(auth?.jwt?.jwksUri, { placeholder: "https://login.example.com/keys", spellcheck: "false" });
  const mtls = checkbox("Client certificate (mTLS)", `${base}.mtls`, auth?.mtls);
  const required = checkbox("Certificate required", `${base}.mtls.required`, auth?.mtls?.required ?? true);
  const keyPart = h("div", { class: "cols" }, errorSlot(`${base}.apiKey`),
    field("Key header", `${base}.apiKey.header`, header), field("Key kind", `${base}.apiKey.mode`, mode));
  const jwtPart = h("div", { class: "cols" }, errorSlot(`${base}.jwt`),
    field("Issuer", `${base}.jwt.issuer`, issuer),
    field("Audiences", `${base}.jwt.audiences`, audiences, "separated by commas"),
    field("JWKS URI", `${base}.jwt.jwksUri`, jwksUri));
  const show = () => {
    keyPart.hidden = which.value !== "apiKey";
    jwtPart.hidden = which.value !== "jwt";
    required.el.hidden = !mtls.box.checked;
    mtls.el.hidden = !mtlsAllowed;
  };
  which.addEventListener("change", show);
  mtls.box.addEventListener("change", show);
  show();
  return {
    el: h("fieldset", {}, h("legend", {}, "Authentication"),
      field("Credential", base, which), keyPart, jwtPart, mtls.el, required.el),
    read() {
      const read = {};
      if (which.value === "apiKey") {
        read.apiKey = { ...(auth?.apiKey || {}), header: textOf(header), mode: mode.value };
      } else if (which.value === "jwt") {
        read.jwt = { ...(auth?.jwt || {}), issuer: issuer.value.trim(), audiences: listOf(audiences), jwksUri: textOf(jwksUri) };
      }
      if (mtlsAllowed && mtls.box.checked) read.mtls = { ...(auth?.mtls || {}), required: required.box.checked };
      return Object.keys(read).length ? read : undefined;
    },
  };
}

// A route named without a namespace is in the API's project.
function attachedFields(spec, project) {
  const auth = authentication(spec.authentication, { mtlsAllowed: false });
  const routes = spec.targetRefs.map((ref) => h("li", {}, `${ref.kind} ${ref.namespace || project}/${ref.name}`));
  return {
    el: [
      h("fieldset", {}, h("legend", {}, "Attached to"),
        h("ul", {}, routes),
        h("p", { class: "hint" }, "These routes carry the API's traffic; change which ones in the YAML editor.")),
      auth.el,
    ],
    read: () => ({ authentication: auth.read() }),
  };
}

export function fields({ spec, project }) {
  if (spec.targetRefs?.length) return attachedFields(spec, project);
  const basePath = textInput(spec.basePath, { placeholder: "/orders", spellcheck: "false" });
  const operations = rowList({
    legend: "Operations", hint: "None: every method and path under the base path.", item: "Operation", path: "spec.operations", add: "Add operation",
    values: spec.operations || [], make: operation, blank: () => ({ method: "GET", path: "" }),
  });
  const backends = rowList({
    legend: "Backends", hint: "Requests are split between them by weight.", item: "Backend", path: "spec.backends", add: "Add backend",
    values: spec.backends || [{ weight: 100 }], make: backend, blank: () => ({ weight: 100 }),
  });
  const auth = authentication(spec.authentication);
  return {
    el: [
      field("Base path", "spec.basePath", basePath, "where the gateway serves it, e.g. /orders"),
      operations.el,
      backends.el,
      auth.el,
    ],
    read: () => ({
      basePath: basePath.value.trim(),
      operations: operations.read(),
      backends: backends.read(),
      authentication: auth.read(),
    }),
  };
}
