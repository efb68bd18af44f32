"""Counts and times every gRPC call a server answers, by method and status code.

The method label is only ever a registered method: calls to unknown ones are not counted, so a client
cannot grow the label set by making names up.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from meshplane.observability.metrics import GRPC_LATENCY, GRPC_REQUESTS


def _code(context: grpc.aio.ServicerContext, error: BaseException | None) -> grpc.StatusCode:
    """The status the caller sees: what the handler set or aborted with, else OK, or what its error becomes."""
    if isinstance(error, asyncio.CancelledError | GeneratorExit):
        return grpc.StatusCode.CANCELLED
    code = context.code()
    if code is not None:
        return code
    return grpc.StatusCode.OK if error is None else grpc.StatusCode.UNKNOWN


def _record(method: str, started: float, context: grpc.aio.ServicerContext, error: BaseException | None) -> None:
    GRPC_REQUESTS.labels(method, _code(context, error).name).inc()
    GRPC_LATENCY.labels(method).observe(time.perf_counter() - started)


class MeasureCalls(grpc.aio.ServerInterceptor):
    """Records each call's outcome in `meshplane_grpc_requests_total` and its duration (a stream's whole life)
    in `meshplane_grpc_request_duration_seconds`. Response streams must be async generators, as ours are."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method: str = handler_call_details.method
        if handler.response_streaming:
            return _streaming(handler, method)
        return _unary(handler, method)


def _unary(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
    behavior = handler.stream_unary if handler.request_streaming else handler.unary_unary

    async def measured(request: Any, context: grpc.aio.ServicerContext) -> Any:
        started = time.perf_counter()
        try:
            response = await behavior(request, context)
        except BaseException as exc:
            _record(method, started, context, exc)
            raise
        _record(method, started, context, None)
        return response

    make = grpc.stream_unary_rpc_method_handler if handler.request_streaming else grpc.unary_unary_rpc_method_handler
    return make(measured, handler.request_deserializer, handler.response_serializer)


def _streaming(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
    behavior = handler.stream_stream if handler.request_streaming else handler.unary_stream

    async def measured(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        started = time.perf_counter()
        try:
            async for response in behavior(request, context):
                yield response
        except BaseException as exc:
            _record(method, started, context, exc)
            raise
        _record(method, started, context, None)

    make = grpc.stream_stream_rpc_method_handler if handler.request_streaming else grpc.unary_stream_rpc_method_handler
    return make(measured, handler.request_deserializer, handler.response_serializer)
