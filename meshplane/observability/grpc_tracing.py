"""Spans for unary gRPC calls on both ends, the W3C trace context travelling in the call's metadata.

Streams are left alone: an ADS stream lives as long as a connection, so a span for it would say nothing
about any one change; what it carries is traced per pushed resource instead (see meshplane.xds).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from opentelemetry.trace import SpanKind

from meshplane.grpc_handlers import Behavior, HandlerInterceptor, same_shape
from meshplane.observability.tracing import context_of, current_carrier, tracer


def _rpc_attributes(method: str) -> dict[str, str]:
    service, _, name = method.lstrip("/").partition("/")
    return {"rpc.system": "grpc", "rpc.service": service, "rpc.method": name}


class TraceUnaryCalls(grpc.aio.UnaryUnaryClientInterceptor):
    """A client span per call, its context sent as `traceparent` metadata."""

    async def intercept_unary_unary(
        self,
        continuation: Callable[[grpc.aio.ClientCallDetails, Any], Awaitable[grpc.aio.UnaryUnaryCall]],
        client_call_details: grpc.aio.ClientCallDetails,
        request: Any,
    ) -> grpc.aio.UnaryUnaryCall:
        method = client_call_details.method
        method = method.decode() if isinstance(method, bytes) else method
        with tracer().start_as_current_span(
            method.lstrip("/"), kind=SpanKind.CLIENT, attributes=_rpc_attributes(method)
        ):
            carried = (current_carrier() or {}).items()
            metadata = grpc.aio.Metadata(*(client_call_details.metadata or ()), *carried)
            call = await continuation(client_call_details._replace(metadata=metadata), request)
            await call  # the span lasts until the answer, and records the error of a failed call
            return call


class TraceUnaryHandlers(HandlerInterceptor):
    """A server span per unary call, the child of the span named by the caller's `traceparent` metadata."""

    def wrap(self, handler: grpc.RpcMethodHandler, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        if handler.unary_unary is None:
            return handler
        behavior: Behavior = handler.unary_unary
        method: str = details.method
        parent = context_of(dict(details.invocation_metadata or ()))

        async def traced(request: Any, context: grpc.aio.ServicerContext) -> Any:
            with tracer().start_as_current_span(
                method.lstrip("/"), context=parent, kind=SpanKind.SERVER, attributes=_rpc_attributes(method)
            ):
                return await behavior(request, context)

        return same_shape(handler, traced)
