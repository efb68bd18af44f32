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

// Each draw gets a view of its own and a number: a page left before it loaded (a slow answer) then draws into a
// view no longer shown, and neither takes the focus nor leaves a live subscription behind.
let drawing = 0;

async function draw() {
  const mine = ++drawing;
  const current = () => mine === drawing;
  stopPage?.();
  stopPage = null;
  if (!session.principal && session.token) {
    try {
      await signIn(session.token);
    } catch (error) {
      signOut();
    }
    if (!current()) return;
  }
  const path = location.hash.slice(1) || "/fleet";
  header();
  const view = h("div", { class: "view" });
  clear(main, view);
  if (!session.principal) {
    stopPage = signin.render(view, { onSignedIn: () => { location.hash = `#${path === "/signin" ? "/fleet" : path}`; draw(); } });
    return;
  }
  const found = match(path);
  if (!found) {
    clear(view, h("h1", {}, "Not found"), h("p", {}, "No page here. ", h("a", { href: "#/fleet" }, "Go to the fleet.")));
    return;
  }
  const [page, params] = found;
  let stop = null;
  try {
    stop = (await page.render(view, params)) || null;
  } catch (error) {
    const message = error instanceof ApiError ? error.message : String(error);
    clear(view, h("h1", {}, "Could not load this page"), h("p", { class: "error", role: "alert" }, message));
  }
  if (!current()) {
    stop?.();
    return;
  }
  stopPage = stop;
  main.focus({ preventScroll: true });
}

document.getElementById("sign-out").addEventListener("click", () => {
  signOut();
  location.hash = "#/signin";
  draw();
});
window.addEventListener("hashchange", draw);
draw();
