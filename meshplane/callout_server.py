"""The gRPC server of Envoy's per-request callouts (ext_authz Check, RLS ShouldRateLimit), on grpclib.

Envoy calls these once per request, and the decision behind each call takes microseconds. grpc.aio
hands every call from its core's threads to the event loop and back; under load that handoff was
nearly all of the rate limiter's core, the decision 3% of it. grpclib speaks HTTP/2 on the event loop
itself, so a call costs the parsing and the decision and little else.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from grpclib.const import Cardinality, Handler, Status
from grpclib.exceptions import GRPCError
from grpclib.server import Server, Stream

from meshplane.config import split_address
from meshplane.lifecycle import HttpServer, Supervisor
from meshplane.observability.metrics import metrics_app
from meshplane.xds.client import DeltaClient

Answer = Callable[[Any], Awaitable[Message]]
"""Turns one request message into its response; raising grpclib's GRPCError fails the call with its status."""


Serve = Callable[[Stream[Any, Any]], Awaitable[None]]
"""Runs one bidirectional stream to its end: reads with `recv_message` (or `async for`), sends as it goes."""


def method_path(method: MethodDescriptor) -> str:
    return f"/{method.containing_service.full_name}/{method.name}"


@dataclass(frozen=True)
class Unary:
    """A unary method of a service, as its proto descriptor names it, and what answers it."""

    method: MethodDescriptor
    answer: Answer


@dataclass(frozen=True)
class Bidirectional:
    """A bidirectional streaming method (one stream per client, held open), and what serves each stream."""

    method: MethodDescriptor
    serve: Serve


class CalloutServer:
    """Serves unary and bidirectional methods on one address. Once stopping, new calls are refused as
    UNAVAILABLE (Envoy applies its failure mode) while the unary calls in flight finish, up to a grace;
    open streams end with the server."""

    def __init__(self, methods: Sequence[Unary | Bidirectional]) -> None:
        self._mapping = {
            method_path(method.method): self._handler(method) if isinstance(method, Unary) else self._streams(method)
            for method in methods
        }
        self._server = Server([self])
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._stopping = False

    def __mapping__(self) -> dict[str, Handler]:
        return self._mapping

    def _handler(self, method: Unary) -> Handler:
        answer = method.answer

        async def handle(stream: Stream[Any, Any]) -> None:
            if self._stopping:
                raise GRPCError(Status.UNAVAILABLE, "shutting down")
            self._in_flight += 1
            self._idle.clear()
            try:
                request = await stream.recv_message()
                await stream.send_message(await answer(request))
            except asyncio.CancelledError:
                if not self._stopping:
                    raise
                # Cancelled by stop() past its grace: answer, so the caller fails now rather than at its deadline.
                raise GRPCError(Status.UNAVAILABLE, "shutting down") from None
            finally:
                self._in_flight -= 1
                if not self._in_flight:
                    self._idle.set()

        return Handler(handle, Cardinality.UNARY_UNARY, *_message_types(method.method))

    def _streams(self, method: Bidirectional) -> Handler:
        serve = method.serve

        async def handle(stream: Stream[Any, Any]) -> None:
            if self._stopping:
                raise GRPCError(Status.UNAVAILABLE, "shutting down")
            await serve(stream)

        return Handler(handle, Cardinality.STREAM_STREAM, *_message_types(method.method))

    async def start(self, address: str) -> None:
        """Listen on `address` (`host:port`)."""
        host, port = split_address(address)
        await self._server.start(host, port, backlog=1024)

    async def stop(self, grace: float) -> None:
        """Calls in flight get up to `grace` seconds to answer; those still running then are answered UNAVAILABLE."""
        self._stopping = True
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace):
                await self._idle.wait()
        self._server.close()
        await self._server.wait_closed()


def _message_types(method: MethodDescriptor) -> tuple[type[Message], type[Message]]:
    return GetMessageClass(method.input_type), GetMessageClass(method.output_type)


async def serve_fed_callouts(
    process: str,
    server: CalloutServer,
    address: str,
    feed: DeltaClient,
    metrics_address: str | None,
    stop: asyncio.Event,
    grace: float,
) -> None:
    """What the enforcer and the rate limiter do: answer callouts on `address` with what `feed` keeps, and
    /metrics on `metrics_address` (when given), until `stop` is set. The feed and the metrics are tasks the
    process cannot do without: either dying stops it (TaskFailed), never silently."""
    metrics = (
        HttpServer(metrics_app(), metrics_address, what=f"{process} metrics", grace=grace) if metrics_address else None
    )
    if metrics is not None:
        metrics.bind()  # a port in use stops the process before it answers anything
    try:
        await server.start(address)
        try:
            async with Supervisor(process) as tasks:
                tasks.start(f"{process}-xds", feed.run, on_failure="exit")
                if metrics is not None:
                    tasks.start(f"{process}-metrics", metrics.serve, on_failure="exit")
                await stop.wait()
        finally:
            await server.stop(grace)
    finally:
        if metrics is not None:
            metrics.close()
