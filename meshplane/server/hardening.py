"""Limits every north-API request meets before any route sees it: a bounded body, and one of
the content types the API speaks (JSON, or YAML for objects). (No CORS middleware is installed:
browsers get no cross-origin access.)"""

from __future__ import annotations

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from meshplane.server.problems import problem_response
from meshplane.server.yaml_bodies import YAML_TYPES

BODY_CONTENT_TYPES = frozenset({"application/json", "application/merge-patch+json", *YAML_TYPES})
DEFAULT_MAX_BODY = 1 << 20


class RequestLimits:
    def __init__(self, app: ASGIApp, max_body: int = DEFAULT_MAX_BODY):
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body:
            await self._refuse(scope, receive, send, 413, f"the body is larger than {self.max_body} bytes")
            return
        body = b""
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_body:
                await self._refuse(scope, receive, send, 413, f"the body is larger than {self.max_body} bytes")
                return
        content_type = headers.get(b"content-type", b"").split(b";")[0].strip().decode("latin-1").lower()
        if body and content_type not in BODY_CONTENT_TYPES:
            shown = content_type or "none"
            detail = f"send JSON (application/json) or YAML (application/yaml), not {shown}"
            await self._refuse(scope, receive, send, 415, detail)
            return
        await self.app(scope, _replay(body), send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, status: int, detail: str) -> None:
        response = problem_response(Request(scope), status, detail)
        await response(scope, receive, send)


def _replay(body: bytes) -> Receive:
    """A receive channel that hands the app the body already read, then reports the client gone."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}

    return receive
