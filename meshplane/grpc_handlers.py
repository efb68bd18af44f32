"""Server interceptors that put their own behaviour in front of each method's handler, for any of the four
call shapes."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

Behavior = Callable[[Any, grpc.aio.ServicerContext], Any]
"""A handler's function: it returns an awaitable answer, or an async iterator of them for a response stream."""

_MAKERS = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


def behavior_of(handler: grpc.RpcMethodHandler) -> Behavior:
    """The function behind `handler`, whatever its shape."""
    return handler.unary_unary or handler.unary_stream or handler.stream_unary or handler.stream_stream


def same_shape(handler: grpc.RpcMethodHandler, behavior: Behavior) -> grpc.RpcMethodHandler:
    """A handler that runs `behavior` in place of `handler`'s function, with the same shape and serializers."""
    make = _MAKERS[bool(handler.request_streaming), bool(handler.response_streaming)]
    return make(behavior, handler.request_deserializer, handler.response_serializer)


class HandlerInterceptor(grpc.aio.ServerInterceptor):
    """Hands `wrap` the handler of every call to a registered method; calls to unknown methods pass untouched."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        return None if handler is None else self.wrap(handler, handler_call_details)

    @abstractmethod
    def wrap(self, handler: grpc.RpcMethodHandler, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        """The handler the call runs instead of `handler` (which it may be)."""
