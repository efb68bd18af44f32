"""A delta ADS client, generic over type URLs: keeps one stream up and hands every update to its owner."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

import grpc
from envoy.config.core.v3.base_pb2 import Node
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.rpc import code_pb2, status_pb2

from meshplane.lifecycle import DEFAULT_BACKOFF, Backoff, describe

log = logging.getLogger(__name__)

RECONNECT_CHANNEL_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", 5_000),
)
"""For a channel a DeltaClient streams over: gRPC's own connection backoff grows to two minutes by default,
so after a long outage a client would stay away that long from a server that is back; this keeps the
channel's retries in step with the stream's (at most 5 s apart)."""


class UpdateRejected(Exception):
    """Raised by ``on_update`` to NACK an update; the message goes back to the server. An owner may have
    taken the parts of the update it could use: the server then offers the refused resources again only
    in a later version."""


@dataclass(frozen=True, slots=True)
class DeltaUpdate:
    """One response: resources to add or replace, and names to remove."""

    type_url: str
    upserts: list[discovery_pb2.Resource]
    removed: list[str]
    nonce: str


class DeltaClient:
    """Subscribes to every type URL as a wildcard on one delta ADS stream, forever.

    On each (re)connect it reports what it already holds (``initial_versions``), so the server
    sends only the difference. Updates are applied in order; each is ACKed once ``on_update``
    returns and NACKed if it raises.
    """

    def __init__(
        self,
        channel_factory: Callable[[], grpc.aio.Channel],
        node: Node,
        type_urls: Sequence[str],
        *,
        initial_versions: Callable[[str], Mapping[str, str]],
        on_update: Callable[[DeltaUpdate], Awaitable[None]],
        on_connected: Callable[[], Awaitable[None]] | None = None,
        backoff: Backoff = DEFAULT_BACKOFF,
        metadata: Sequence[tuple[str, str]] = (),
    ) -> None:
        self._channel_factory = channel_factory
        self._node = node
        self._type_urls = tuple(type_urls)
        self._initial_versions = initial_versions
        self._on_update = on_update
        self._on_connected = on_connected
        self._backoff = backoff
        self._metadata = tuple(metadata)
        self._connected = False

    @property
    def connected(self) -> bool:
        """Whether the current stream has delivered a response (so the server accepted it)."""
        return self._connected

    async def run(self) -> None:
        """Keep a stream up until cancelled, backing off between attempts; a stream that delivered a
        response was progress, so the next attempt comes after the shortest delay again.

        The factory is asked for a channel at every attempt. A channel it hands out again is
        reused (it may be shared with its owner); one it replaces, and the last one, are closed.
        """
        retries = self._backoff.retries()
        channel: grpc.aio.Channel | None = None
        try:
            while True:
                fresh = self._channel_factory()
                if channel is not None and fresh is not channel:
                    await channel.close()
                channel = fresh
                try:
                    await self._stream(channel)
                    ended = "closed by the server"
                except grpc.aio.AioRpcError as exc:
                    ended = f"failed: {describe(exc)}"
                except Exception as exc:
                    log.exception("xDS stream failed")
                    ended = f"failed: {describe(exc)}"
                finally:
                    if self._connected:
                        retries.reset()
                    self._connected = False
                delay = retries.next_delay()
                log.warning("xDS stream %s; reconnecting in %.2f s", ended, delay)
                await asyncio.sleep(delay)
        finally:
            if channel is not None:
                await channel.close()

    async def _stream(self, channel: grpc.aio.Channel) -> None:
        call = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).DeltaAggregatedResources(metadata=self._metadata)
        try:
            for index, type_url in enumerate(self._type_urls):
                request = discovery_pb2.DeltaDiscoveryRequest(
                    type_url=type_url,
                    resource_names_subscribe=["*"],
                    initial_resource_versions=self._initial_versions(type_url),
                )
                if index == 0:
                    request.node.CopyFrom(self._node)
                await call.write(request)
            while (response := await call.read()) is not grpc.aio.EOF:
                if not self._connected:
                    self._connected = True
                    if self._on_connected is not None:
                        await self._on_connected()
                await call.write(await self._apply(response))
        finally:
            call.cancel()

    async def _apply(self, response: discovery_pb2.DeltaDiscoveryResponse) -> discovery_pb2.DeltaDiscoveryRequest:
        """Hand one response to the owner; return its ACK, or its NACK if the owner refused it."""
        reply = discovery_pb2.DeltaDiscoveryRequest(type_url=response.type_url, response_nonce=response.nonce)
        update = DeltaUpdate(
            response.type_url, list(response.resources), list(response.removed_resources), response.nonce
        )
        try:
            await self._on_update(update)
        except UpdateRejected as exc:
            log.warning("rejected %s update: %s", response.type_url, exc)
            reply.error_detail.CopyFrom(status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message=str(exc)))
        except Exception as exc:
            log.exception("applying %s update failed", response.type_url)
            message = str(exc) or type(exc).__name__
            reply.error_detail.CopyFrom(status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message=message))
        return reply
