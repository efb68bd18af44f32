"""`/ui/`: the console's files, from the package, with a policy that lets them load nothing from elsewhere.

The page holds the caller's bearer token in the tab's session storage and sends it in the Authorization header
of each call, as the CLI does: no cookie carries it, so no other site can make the browser act with it (CSRF),
and it never appears in a URL.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.responses import RedirectResponse
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

from meshplane.model.registry import REGISTRY

STATIC = Path(__file__).parent / "static"


def content_policy(identity_origin: str | None) -> str:
    """Scripts, styles and images from the server only; calls to it (and to the OpenID provider's token
    endpoint, for the sign-in's code exchange); never framed."""
    connect = " ".join(filter(None, ["'self'", identity_origin]))
    return (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        f"connect-src {connect}; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )


class ConsoleFiles(StaticFiles):
    """The console's static files, each answer with the content policy and no caching of stale code."""

    def __init__(self, policy: str) -> None:
        super().__init__(directory=STATIC, html=True)
        self.policy = policy

    async def get_response(self, path: str, scope: Scope) -> Any:
        response = await super().get_response(path, scope)
        response.headers["Content-Security-Policy"] = self.policy
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["Cache-Control"] = "no-cache"
        return response


def install_console(app: FastAPI, oidc: dict[str, str] | None = None) -> None:
    """Serve the console at /ui/. `oidc`: what its sign-in page needs to offer signing in with the server's
    OpenID provider (issuer, clientId, name, authorizationEndpoint, tokenEndpoint), if it has one."""
    router = APIRouter(include_in_schema=False)
    identity_origin = None
    if oidc is not None:
        token_endpoint = oidc.get("tokenEndpoint", "")
        identity_origin = "/".join(token_endpoint.split("/")[:3]) or None

    @router.get("/ui")
    async def ui() -> RedirectResponse:
        return RedirectResponse("/ui/")

    @router.get("/ui/config.json")
    async def config() -> dict[str, Any]:
        return {"oidc": oidc}

    @router.get("/ui/kinds.json")
    async def kinds() -> list[dict[str, Any]]:
        """The kinds REST serves, from the registry, for the object pages' pickers."""
        return [
            {"kind": info.kind, "plural": info.plural, "namespaced": info.namespaced, "writable": info.writable}
            for info in REGISTRY
            if info.exposed
        ]

    app.include_router(router)
    app.mount("/ui", ConsoleFiles(content_policy(identity_origin)), name="console")
