// Every page of the console: a hash path pattern (":name" is a part) and the module that draws it. Each module
// exports `render(main, params)`, which may return a function that stops what the page started (its watch).

import * as cluster from "./pages/cluster.js";
import * as fleet from "./pages/fleet.js";
import * as forms from "./pages/forms.js";
import * as keys from "./pages/keys.js";
import * as rollout from "./pages/rollout.js";
import * as rollouts from "./pages/rollouts.js";
import * as object from "./pages/object.js";
import * as objectEditor from "./pages/editor.js";
import * as objects from "./pages/objects.js";

export const ROUTES = [
  ["/fleet", fleet],
  ["/clusters/:name", cluster],
  ["/forms/:project/:plural", forms],
  ["/forms/:project/:plural/:name", forms],
  ["/keys/:project/:name", keys],
  ["/rollouts", rollouts],
  ["/rollouts/:project/:name", rollout],
  ["/objects", objects],
  ["/objects/:project/:plural", objects],
  ["/objects/:project/:plural/:name", object],
  ["/objects/:project/:plural/:name/edit", objectEditor],
  ["/create/:project/:plural", objectEditor],
];

export const NAV = [
  ["#/fleet", "Fleet"],
  ["#/objects", "Objects"],
  ["#/rollouts", "Rollouts"],
];
