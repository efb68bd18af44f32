"""Counts and times every gRPC call a server answers, by method and status code.

The method label is only ever a registered method: calls to unknown ones are not counted, so a client
cannot grow the label set by making names up.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from meshplane.grpc_handlers import Behavior, HandlerInterceptor, behavior_of, same_shape
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


class MeasureCalls(HandlerInterceptor):
    """Records each call's outcome in `meshplane_grpc_requests_total` and its duration (a stream's whole life)
    in `meshplane_grpc_request_duration_seconds`. Response streams must be async generators, as ours are."""

    def wrap(self, handler: grpc.RpcMethodHandler, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        measure = _streaming if handler.response_streaming else _unary
        return same_shape(handler, measure(behavior_of(handler), details.method))


def _unary(behavior: Behavior, method: str) -> Behavior:
    async def measured(request: Any, context: grpc.aio.ServicerContext) -> Any:
        started = time.perf_counter()
        try:
            response = await behavior(request, context)
        except BaseException as exc:
            _record(method, started, context, exc)
            raise
        _record(method, started, context, None)
        return response

    return measured


def _streaming(behavior: Behavior, method: str) -> Behavior:
    async def measured(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        started = time.perf_counter()
        try:
            async for response in behavior(request, context):
                yield response
        except BaseException as exc:
            _record(method, started, context, exc)
            raise
        _record(method, started, context, None)

    return measured
