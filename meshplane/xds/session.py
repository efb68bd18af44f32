"""What both ADS variants keep per stream: who is on it, type order, nonces, and callback plumbing."""

from __future__ import annotations

import bisect
import functools
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from envoy.config.core.v3.base_pb2 import Node
from prometheus_client import Counter, Histogram

from meshplane.observability.metrics import (
    ACKS,
    NACKS,
    PUSH_LATENCY,
    PUSHED_BYTES,
    PUSHED_RESOURCES,
    PUSHES,
    short_type,
)
from meshplane.xds.cache import ResourceCache
from meshplane.xds.callbacks import StreamCallbacks

log = logging.getLogger(__name__)

Request = TypeVar("Request")
State = TypeVar("State")
TypeRank = Callable[[str], tuple[int, str]]


def blamed(sent: Mapping[str, str], held: Mapping[str, str]) -> dict[str, str]:
    """The versions a NACK of a response carrying `sent` is about, the client holding `held` (what it
    ACKed). A resource sent again at the version the client holds (its unchanged neighbours in a SotW
    set, one a delta client resubscribed to) is not what it refused: blamed too, that good version, and
    every later configuration keeping it, would count as rejected. Only when nothing sent is new to the
    client is all of it blamed."""
    new = {name: version for name, version in sent.items() if held.get(name) != version}
    return new or dict(sent)


@dataclass(frozen=True, slots=True)
class _Meters:
    """The labelled metrics of one (server, type): found once, not at every push of every stream."""

    pushes: Counter
    pushed_resources: Counter
    pushed_bytes: Counter
    push_latency: Histogram
    acks: Counter


@functools.cache
def _meters(server: str, type_url: str) -> _Meters:
    kind = short_type(type_url)
    return _Meters(
        PUSHES.labels(server, kind),
        PUSHED_RESOURCES.labels(server, kind),
        PUSHED_BYTES.labels(server, kind),
        PUSH_LATENCY.labels(server, kind),
        ACKS.labels(server, kind),
    )


class Session(ABC, Generic[Request, State]):
    """Protocol state of one stream; the server feeds it requests and cache generations."""

    def __init__(
        self, cache: ResourceCache, group: str, node: Node, callbacks: StreamCallbacks, rank: TypeRank, server: str
    ) -> None:
        self.server = server
        self.cache = cache
        self.group = group
        self.node = node
        self.callbacks = callbacks
        self.types: dict[str, State] = {}
        self._rank = rank
        self._type_urls: list[str] = []
        self._nonces = 0

    @abstractmethod
    async def receive(self, request: Request) -> bool:
        """Take one client request: settle its ACK/NACK and apply its subscription changes.

        True when the request may change what `respond` sends; a bare ACK or NACK cannot, so the
        stream need not look again.
        """

    @abstractmethod
    def respond(self, generation: int) -> list[bytes]:
        """Encoded responses the client needs at ``generation``, in type order.

        Computed in one go, without awaiting, so all of them reflect one state of the cache.
        """

    @property
    def type_urls(self) -> list[str]:
        """Subscribed type URLs in send order."""
        return self._type_urls

    def track(self, type_url: str, state: State) -> None:
        """Start keeping ``state`` for a newly requested type."""
        self.types[type_url] = state
        bisect.insort(self._type_urls, type_url, key=self._rank)

    def next_nonce(self) -> str:
        self._nonces += 1
        return str(self._nonces)

    def pushed(self, type_url: str, resources: int, size: int, since: int) -> None:
        """Count one response, the resources (upserted or removed) it carries and its `size` in bytes, and time
        it from the oldest stamped change after ``since``, the generation the stream had already seen of the type.
        A type's first response (``since`` < 0) syncs the stream rather than pushes a change: not timed."""
        meters = _meters(self.server, type_url)
        meters.pushes.inc()
        meters.pushed_resources.inc(resources)
        meters.pushed_bytes.inc(size)
        if since >= 0 and (changed_at := self.cache.changed_at(self.group, type_url, since)) is not None:
            meters.push_latency.observe(max(0.0, time.time() - changed_at))

    async def acked(self, type_url: str, versions: Mapping[str, str]) -> None:
        _meters(self.server, type_url).acks.inc()
        await self._notify(self.callbacks.on_ack(self.group, self.node, type_url, versions))

    async def nacked(self, type_url: str, versions: Mapping[str, str], message: str) -> None:
        NACKS.labels(self.server, short_type(type_url)).inc()
        log.warning("%s (group %s) rejected %s: %s", self.node.id, self.group, type_url, message)
        await self._notify(self.callbacks.on_nack(self.group, self.node, type_url, versions, message))

    async def closed(self) -> None:
        await self._notify(self.callbacks.on_stream_close(self.node, self.group))

    async def _notify(self, hook: Awaitable[None]) -> None:
        """A failing hook is logged, not allowed to break the stream it observes."""
        try:
            await hook
        except Exception:
            log.exception("xDS stream callback failed for %s", self.node.id)
