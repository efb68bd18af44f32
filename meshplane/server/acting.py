"""Who each write is made for (see meshplane.audit), set where requests and reports come in.

A north-API request acts for its caller: the middleware starts it with the client's address, the request's
id (the caller's `X-Request-Id` when it is a sane one, else a new one; answered in the response either way)
and the trace id of its span; authentication then names the principal (`Principal.who`). An agent's report
acts for its cluster, `cluster/<name>`.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import replace

from opentelemetry import trace
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from meshplane.audit import Actor, act_as, acting_as, current_actor
from meshplane.model.meta import cluster_origin
from meshplane.server.auth.principal import Principal

REQUEST_ID = "X-Request-Id"
_SANE_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
ANONYMOUS = "anonymous"
"""Who a request is until it authenticates (it writes nothing before)."""


def current_trace_id() -> str | None:
    context = trace.get_current_span().get_span_context()
    return trace.format_trace_id(context.trace_id) if context.is_valid else None


def request_id_of(scope: Scope) -> str:
    for key, value in scope["headers"]:
        if key.decode("latin-1").lower() == REQUEST_ID.lower():
            sent = value.decode("latin-1")
            if _SANE_ID.fullmatch(sent):
                return sent
    return uuid.uuid4().hex


class RequestActor:
    """ASGI middleware, inside the one that starts the request's span (its trace id is read here)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = request_id_of(scope)
        client = scope.get("client")
        actor = Actor(ANONYMOUS, client[0] if client else None, request_id, current_trace_id())

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[REQUEST_ID] = request_id
            await send(message)

        with acting_as(actor):
            await self.app(scope, receive, send_with_id)


def act_for(principal: Principal) -> None:
    """The rest of the request acts for `principal` (authentication runs in the request's own task)."""
    act_as(replace(current_actor() or Actor(ANONYMOUS), who=principal.who))


def for_cluster(cluster: str, peer: str | None = None) -> Actor:
    """The actor of what an agent's report writes."""
    return Actor(cluster_origin(cluster), address=peer, trace_id=current_trace_id())
