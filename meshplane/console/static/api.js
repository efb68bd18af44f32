// The north REST API as the console calls it: the bearer token in the Authorization header of every call,
// kept in this tab's session storage only (never a cookie, never a URL).

const TOKEN = "meshplane.token";

export class ApiError extends Error {
  constructor(status, problem) {
    super(problem?.detail || problem?.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem || {};
  }

  // The field errors of a problem+json answer: [{path, message}].
  get fieldErrors() {
    return this.problem.errors || [];
  }
}

export const session = {
  get token() { return sessionStorage.getItem(TOKEN); },
  set token(value) {
    if (value) sessionStorage.setItem(TOKEN, value);
    else sessionStorage.removeItem(TOKEN);
  },
  principal: null,
};

export async function call(method, path, body, { headers = {}, raw = false } = {}) {
  const init = { method, headers: { Accept: "application/json", ...headers } };
  if (session.token) init.headers.Authorization = `Bearer ${session.token}`;
  if (body !== undefined) {
    // A body given with a Content-Type of its own (YAML text) goes as it is; any other is sent as JSON.
    const json = !init.headers["Content-Type"];
    if (json) init.headers["Content-Type"] = "application/json";
    init.body = json ? JSON.stringify(body) : body;
  }
  const answer = await fetch(path, init);
  if (!answer.ok) {
    let problem = null;
    try { problem = await answer.json(); } catch { /* not JSON: the status says enough */ }
    throw new ApiError(answer.status, problem);
  }
  if (raw) return answer;
  return answer.status === 204 ? null : answer.json();
}

export const get = (path) => call("GET", path);

// Every page of a list, as one array; `seen.revision` gets the list's revision (where a watch picks up).
export async function listAll(path, seen = {}) {
  const items = [];
  let next = null;
  do {
    const separator = path.includes("?") ? "&" : "?";
    const page = await get(next ? `${path}${separator}limit=500&continue=${encodeURIComponent(next)}` : `${path}${separator}limit=500`);
    items.push(...page.items);
    seen.revision ??= page.metadata?.resourceVersion;
    next = page.metadata?.continue;
  } while (next);
  return items;
}

// Check a token and learn whom it speaks for; throws ApiError(401) for a bad one.
export async function signIn(token) {
  const previous = session.token;
  session.token = token;
  try {
    session.principal = await get("/v1/whoami");
  } catch (error) {
    session.token = previous;
    throw error;
  }
}

export function signOut() {
  session.token = null;
  session.principal = null;
}

const WRITERS = {
  API: ["publisher"], Gateway: ["publisher"], TLSCertificate: ["publisher"], RateLimitPolicy: ["publisher"],
  RolloutPolicy: ["publisher"], LogicalCloud: ["publisher"], ServiceIntent: ["publisher"],
  EgressIntent: ["publisher"], IngressIntent: ["publisher"], Application: ["subscriber"],
  Subscription: ["subscriber"],
};

// Whether the signed-in principal may change objects of `kind` in `project` (the server decides; this only
// spares a viewer buttons that would be refused).
export function mayWrite(kind, project) {
  const p = session.principal;
  if (!p) return false;
  if (p.project && project !== p.project) return false;
  if (p.role === "admin") return Boolean(project) || !p.project;
  return Boolean(project) && (WRITERS[kind] || []).includes(p.role);
}
