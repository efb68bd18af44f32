// The console's shell: sign-in, the navigation, and the hash router that draws one page at a time.

import { ApiError, session, signIn, signOut } from "./api.js";
import { clear, h } from "./dom.js";
import { ROUTES, NAV } from "./routes.js";
import * as signin from "./pages/signin.js";

const main = document.getElementById("app");
let stopPage = null;

function match(path) {
  for (const [pattern, page] of ROUTES) {
    const want = pattern.split("/"), got = path.split("/");
    if (want.length !== got.length) continue;
    const params = {};
    if (want.every((part, i) => (part.startsWith(":") ? (params[part.slice(1)] = decodeURIComponent(got[i])) : part === got[i]))) {
      return [page, params];
    }
  }
  return null;
}

function header() {
  const top = document.getElementById("top");
  top.hidden = !session.principal;
  if (!session.principal) return;
  const path = location.hash.slice(1);
  clear(document.getElementById("nav"), NAV.map(([href, label]) =>
    h("a", { href, "aria-current": path.startsWith(href.slice(1)) ? "page" : null }, label)));
  const p = session.principal;
  clear(document.getElementById("who"), `${p.name} · ${p.role}${p.project ? ` · ${p.project}` : ""}`);
}

async function draw() {
  stopPage?.();
  stopPage = null;
  if (!session.principal && session.token) {
    try {
      await signIn(session.token);
    } catch (error) {
      signOut();
    }
  }
  const path = location.hash.slice(1) || "/fleet";
  header();
  if (!session.principal) {
    stopPage = signin.render(main, { onSignedIn: () => { location.hash = `#${path === "/signin" ? "/fleet" : path}`; draw(); } });
    return;
  }
  const found = match(path);
  if (!found) {
    clear(main, h("h1", {}, "Not found"), h("p", {}, "No page here. ", h("a", { href: "#/fleet" }, "Go to the fleet.")));
    return;
  }
  const [page, params] = found;
  try {
    stopPage = (await page.render(main, params)) || null;
  } catch (error) {
    const message = error instanceof ApiError ? error.message : String(error);
    clear(main, h("h1", {}, "Could not load this page"), h("p", { class: "error", role: "alert" }, message));
  }
  main.focus({ preventScroll: true });
}

document.getElementById("sign-out").addEventListener("click", () => {
  signOut();
  location.hash = "#/signin";
  draw();
});
window.addEventListener("hashchange", draw);
draw();
