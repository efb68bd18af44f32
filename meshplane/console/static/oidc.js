// Signing in with an OpenID provider: the authorization code flow with PKCE (RFC 7636), the code exchanged by
// this page itself (a public client). The verifier and state stay in session storage for the round trip; the
// code and state leave the address bar as soon as they are read.

const PENDING = "meshplane.oidc";

function randomText(bytes) {
  const data = crypto.getRandomValues(new Uint8Array(bytes));
  return btoa(String.fromCharCode(...data)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

async function challengeOf(verifier) {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier)));
  return btoa(String.fromCharCode(...digest)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function redirectUri() {
  return `${location.origin}/ui/`;
}

export async function startOidc(oidc) {
  const verifier = randomText(48), state = randomText(16);
  sessionStorage.setItem(PENDING, JSON.stringify({ verifier, state, back: location.hash }));
  const query = new URLSearchParams({
    response_type: "code",
    client_id: oidc.clientId,
    redirect_uri: redirectUri(),
    scope: "openid",
    state,
    code_challenge: await challengeOf(verifier),
    code_challenge_method: "S256",
  });
  location.assign(`${oidc.authorizationEndpoint}?${query}`);
}

// The token of a sign-in coming back from the provider, or null when this is not one.
export async function finishOidc(oidc) {
  const query = new URLSearchParams(location.search);
  const code = query.get("code");
  if (!code) return null;
  const pending = JSON.parse(sessionStorage.getItem(PENDING) || "null");
  sessionStorage.removeItem(PENDING);
  history.replaceState(null, "", `${location.pathname}${pending?.back || "#/fleet"}`);
  if (!pending || query.get("state") !== pending.state) throw new Error("The sign-in did not come back as it left: try again.");
  const answer = await fetch(oidc.tokenEndpoint, {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({
      grant_type: "authorization_code",
      code,
      redirect_uri: redirectUri(),
      client_id: oidc.clientId,
      code_verifier: pending.verifier,
    }),
  });
  if (!answer.ok) throw new Error(`The provider refused the sign-in (HTTP ${answer.status}).`);
  const tokens = await answer.json();
  return tokens.id_token || tokens.access_token;
}
