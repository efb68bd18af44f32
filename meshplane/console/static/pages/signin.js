// Sign in with a bearer token, or with the server's OpenID provider when it has one (authorization code + PKCE).

import { ApiError, get, signIn } from "../api.js";
import { clear, h } from "../dom.js";
import { finishOidc, startOidc } from "../oidc.js";

export function render(main, { onSignedIn }) {
  const error = h("p", { class: "error", role: "alert", id: "signin-error" });
  const input = h("input", { id: "token", name: "token", type: "password", autocomplete: "off", required: true, "aria-describedby": "signin-error" });
  const form = h("form", { class: "signin", onsubmit: async (event) => {
    event.preventDefault();
    clear(error);
    try {
      await signIn(input.value.trim());
      onSignedIn();
    } catch (failure) {
      const refused = failure instanceof ApiError && failure.status === 401;
      clear(error, refused ? "That token was refused." : `Could not sign in: ${failure.message}`);
      input.select();
    }
  } },
    h("h1", {}, "Sign in to meshplane"),
    h("label", { for: "token" }, "Token"),
    input,
    h("button", { type: "submit" }, "Sign in"),
    error,
  );
  const providers = h("div", { class: "providers" });
  clear(main, form, providers);
  input.focus();
  get("/ui/config.json").then(async ({ oidc }) => {
    if (!oidc) return;
    const token = await finishOidc(oidc).catch((failure) => { clear(error, failure.message); return null; });
    if (token) {
      await signIn(token);
      onSignedIn();
      return;
    }
    clear(providers, h("button", { type: "button", onclick: () => startOidc(oidc) }, `Sign in with ${oidc.name || oidc.issuer}`));
  }).catch(() => {});
}
