"""Every north-API request observed once: counted and timed by route and code, and (except probes and
scrapes) given a server span that continues the caller's W3C `traceparent` when it sends one.

Plain ASGI rather than an "http" middleware function: those run the app in a separate task and stream
its response through a queue, a cost paid on every request.
"""

from __future__ import annotations

import contextlib
import time

from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from meshplane.observability.metrics import HTTP_LATENCY, HTTP_REQUESTS
from meshplane.observability.tracing import context_of, tracer

# Probes and scrapes arrive every few seconds and tell nothing about a change: not traced.
UNTRACED_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


def route_of(scope: Scope) -> str | None:
    """The path template of the route the router chose (it records it in the scope): a bounded name, unlike
    the raw path; None when no route matched."""
    return getattr(scope.get("route"), "path", None)


class ObserveRequests:
    """ASGI middleware, outermost: the span is current while the app runs, so spans the handlers start are
    its children, and the time measured covers every layer."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method = scope["method"]
        started = time.perf_counter()
        status = 500  # what the caller sees if the app fails before it answers
        traced = scope["path"] not in UNTRACED_PATHS
        with self._span(scope) if traced else contextlib.nullcontext() as span:

            async def observed_send(message: Message) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]
                    if span is not None:
                        span.set_attribute("http.response.status_code", status)
                        if status >= 500:
                            span.set_status(Status(StatusCode.ERROR))
                await send(message)

            try:
                await self.app(scope, receive, observed_send)
            finally:
                route = route_of(scope)
                if span is not None and route is not None:
                    span.set_attribute("http.route", route)
                    span.update_name(f"{method} {route}")
                label = route or "unmatched"
                HTTP_REQUESTS.labels(method, label, str(status)).inc()
                HTTP_LATENCY.labels(method, label).observe(time.perf_counter() - started)

    @staticmethod
    def _span(scope: Scope) -> contextlib.AbstractContextManager[Span]:
        headers = {key.decode("latin-1"): value.decode("latin-1") for key, value in scope["headers"]}
        method = scope["method"]
        attributes = {"http.request.method": method, "url.path": scope["path"]}
        return tracer().start_as_current_span(
            method, context=context_of(headers), kind=SpanKind.SERVER, attributes=attributes
        )
