"""A server span for every HTTP request, continuing the caller's W3C `traceparent` when it sends one."""

from __future__ import annotations

from opentelemetry.trace import SpanKind, Status, StatusCode
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from meshplane.observability.tracing import context_of, tracer

# Probes and scrapes arrive every few seconds and tell nothing about a change: not traced.
UNTRACED_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


class TraceRequests:
    """ASGI middleware: the span is current while the app runs, so spans the handlers start are its children."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in UNTRACED_PATHS:
            await self.app(scope, receive, send)
            return
        headers = {key.decode("latin-1"): value.decode("latin-1") for key, value in scope["headers"]}
        method = scope["method"]
        attributes = {"http.request.method": method, "url.path": scope["path"]}
        with tracer().start_as_current_span(
            method, context=context_of(headers), kind=SpanKind.SERVER, attributes=attributes
        ) as span:

            async def send_traced(message: Message) -> None:
                if message["type"] == "http.response.start":
                    status = message["status"]
                    span.set_attribute("http.response.status_code", status)
                    if status >= 500:
                        span.set_status(Status(StatusCode.ERROR))
                await send(message)

            try:
                await self.app(scope, receive, send_traced)
            finally:
                # The router records the route it chose in the scope: a bounded name, unlike the raw path.
                route = getattr(scope.get("route"), "path", None)
                if route is not None:
                    span.set_attribute("http.route", route)
                    span.update_name(f"{method} {route}")
