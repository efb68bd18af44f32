"""The ADS servicer: speaks SotW and delta xDS; what each node group gets is the cache's business."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import grpc
from envoy.config.core.v3.base_pb2 import Node
from envoy.service.discovery.v3 import ads_pb2, ads_pb2_grpc, discovery_pb2

from meshplane.observability.metrics import CONNECTED_STREAMS
from meshplane.xds.cache import ResourceCache
from meshplane.xds.callbacks import NoCallbacks, StreamCallbacks
from meshplane.xds.delta import DeltaSession
from meshplane.xds.session import Session
from meshplane.xds.sotw import SotwSession

__all__ = ["NoCallbacks", "StreamCallbacks", "XdsServer", "add_to_server"]

_SERVICE = ads_pb2.DESCRIPTOR.services_by_name["AggregatedDiscoveryService"].full_name

NodeGroup = Callable[[Node, grpc.aio.ServicerContext], str]


class XdsServer(ads_pb2_grpc.AggregatedDiscoveryServiceServicer):
    """Serves one ``ResourceCache`` over ADS, both variants.

    Responses are yielded already encoded (resources are encoded once and shared by all streams),
    so register with ``add_to_server``, not the generated ``add_..._to_server``.
    ``node_group`` maps a stream's node to its group; raising PermissionError refuses the stream.
    ``name`` labels this server's metrics (e.g. "sync", "gateway").
    ``compress_from``: responses of at least this many bytes go out gzip-compressed (a catch-up or a first
    sync, over what may be a thin link), smaller ones, the everyday single change, as they are; None: never
    (Envoy's own gRPC client is not asked to inflate).
    """

    def __init__(
        self,
        cache: ResourceCache,
        *,
        node_group: NodeGroup,
        type_order: Sequence[str] = (),
        callbacks: StreamCallbacks | None = None,
        name: str = "xds",
        compress_from: int | None = None,
    ) -> None:
        self._name = name
        self._compress_from = compress_from
        self._cache = cache
        self._node_group = node_group
        self._order = {type_url: index for index, type_url in enumerate(type_order)}
        self._callbacks: StreamCallbacks = callbacks or NoCallbacks()

    async def StreamAggregatedResources(
        self, request_iterator: AsyncIterator[discovery_pb2.DiscoveryRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        async for response in self._serve(request_iterator, context, SotwSession, delta=False):
            yield response

    async def DeltaAggregatedResources(
        self,
        request_iterator: AsyncIterator[discovery_pb2.DeltaDiscoveryRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[bytes]:
        async for response in self._serve(request_iterator, context, DeltaSession, delta=True):
            yield response

    def _rank(self, type_url: str) -> tuple[int, str]:
        """Listed types first, in the given order; the rest after them, sorted."""
        return self._order.get(type_url, len(self._order)), type_url

    async def _serve(
        self,
        requests: AsyncIterator[Any],
        context: grpc.aio.ServicerContext,
        session_type: type[Session[Any, Any]],
        *,
        delta: bool,
    ) -> AsyncIterator[bytes]:
        """Answer requests and cache changes as they come, whichever is first."""
        request = await anext(requests, None)
        if request is None:
            return
        node = request.node
        try:
            group = self._node_group(node, context)
        except PermissionError as exc:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, str(exc))
        session = session_type(self._cache, group, node, self._callbacks, self._rank, self._name)
        await self._callbacks.on_stream_open(node, group, delta)
        CONNECTED_STREAMS.labels(self._name).inc()
        compress_from = self._compress_from
        if compress_from is not None:
            context.set_compression(grpc.Compression.Gzip)
        # One wake-up for both sources of work: a request that may change the answer, or a change of the group.
        wake = asyncio.Event()
        await session.receive(request)
        reader = asyncio.create_task(_read_into(requests, session, wake))
        unsubscribe = self._cache.subscribe(group, wake.set)
        try:
            while True:
                wake.clear()  # before looking: a change or request from here on wakes the wait below
                if reader.done():
                    reader.result()  # the request stream failed: end with its error
                    return  # the client closed its side
                for response in session.respond(self._cache.generation(group)):
                    if compress_from is not None and len(response) < compress_from:
                        context.disable_next_message_compression()
                    yield response
                await wake.wait()
        finally:
            unsubscribe()
            reader.cancel()  # not awaited: the stream itself may be being cancelled, and it ends on cancel anyway
            CONNECTED_STREAMS.labels(self._name).dec()
            await session.closed()


async def _read_into(requests: AsyncIterator[Any], session: Session[Any, Any], wake: asyncio.Event) -> None:
    """Hand every request the client sends to the session as it comes (ACKs are settled here, without
    waking the stream); wake the stream for those that may change its answer, and when the client is done."""
    try:
        async for request in requests:
            if await session.receive(request):
                wake.set()
    finally:
        wake.set()


def add_to_server(xds: XdsServer, server: grpc.aio.Server) -> None:
    """Register ``xds`` for ADS; its responses are pre-encoded bytes, so no response serializer."""
    server.add_registered_method_handlers(
        _SERVICE,
        {
            "StreamAggregatedResources": grpc.stream_stream_rpc_method_handler(
                xds.StreamAggregatedResources, request_deserializer=discovery_pb2.DiscoveryRequest.FromString
            ),
            "DeltaAggregatedResources": grpc.stream_stream_rpc_method_handler(
                xds.DeltaAggregatedResources, request_deserializer=discovery_pb2.DeltaDiscoveryRequest.FromString
            ),
        },
    )
