"""Incremental ADS: per type, send only what differs from what the client holds."""

from __future__ import annotations

from dataclasses import dataclass

from envoy.service.discovery.v3 import discovery_pb2
from opentelemetry.trace import Span

from meshplane.xds.acked import AckedVersions
from meshplane.xds.push_trace import encode_traced, end_pushes
from meshplane.xds.resource import VersionedResource
from meshplane.xds.session import Session, blamed


@dataclass(slots=True)
class _Sent:
    """One response awaiting the client's verdict: what it upserted and removed, and its push spans."""

    versions: dict[str, str]
    removed: list[str]
    spans: list[Span]


class _TypeStream:
    """One type on one delta stream."""

    __slots__ = ("acked", "deferred", "forced", "full", "names", "pending", "rejected", "seen", "sent", "wildcard")

    def __init__(self, held: dict[str, str], wildcard: bool) -> None:
        self.wildcard = wildcard
        self.names: set[str] = set()
        # What the client has, or was last sent; sending is driven by the difference to the cache.
        self.sent = held
        self.acked = AckedVersions(held)
        # Versions the client NACKed: never offered again while the cache still has them.
        self.rejected: dict[str, str] = {}
        self.pending: dict[str, _Sent] = {}
        # Set when the type had something to look at while a response was unanswered: look once it is.
        self.deferred = False
        # Names to examine (and send even if held) regardless of the cache's change log.
        self.forced: set[str] = set()
        self.full = True  # next diff must look at everything, not just the change log
        self.seen = -1  # cache generation this type was last diffed at; -1 = never answered


class DeltaSession(Session[discovery_pb2.DeltaDiscoveryRequest, _TypeStream]):
    """One DeltaAggregatedResources stream."""

    async def receive(self, request: discovery_pb2.DeltaDiscoveryRequest) -> bool:
        url = request.type_url
        stream = self.types.get(url)
        held: frozenset[str] = frozenset()
        if stream is None:
            # An empty first request is the legacy spelling of a wildcard subscription.
            legacy = not request.resource_names_subscribe and not request.resource_names_unsubscribe
            stream = _TypeStream(dict(request.initial_resource_versions), legacy)
            held = frozenset(stream.sent)
            self.track(url, stream)
            if held:
                # What a client declares it holds, it accepted on an earlier stream; nothing may be sent for it
                # on this one (it is current), so no ACK would ever say so.
                await self.acked(url, stream.acked)
        else:
            woken = False
            if request.response_nonce:
                await self._settle(url, stream, request)
                if stream.deferred and not stream.pending:
                    stream.deferred, woken = False, True
            if not request.resource_names_subscribe and not request.resource_names_unsubscribe:
                return woken
        for name in request.resource_names_subscribe:
            if name == "*":
                stream.full |= not stream.wildcard
                stream.wildcard = True
            else:
                stream.names.add(name)
                if name not in held:  # the client must get what it asks for, even if we think it has it
                    stream.forced.add(name)
        for name in request.resource_names_unsubscribe:
            if name == "*":
                stream.wildcard = False
                for dropped in [held_name for held_name in stream.sent if held_name not in stream.names]:
                    self._forget(stream, dropped)
            else:
                stream.names.discard(name)
                if stream.wildcard:
                    stream.forced.add(name)  # still covered by the wildcard: tell the client which way
                else:
                    self._forget(stream, name)
        return True

    def respond(self, generation: int) -> list[bytes]:
        responses = []
        for url in self.type_urls:
            response = self._diff(url, self.types[url], generation)
            if response is not None:
                responses.append(response)
        return responses

    def _diff(self, url: str, stream: _TypeStream, generation: int) -> bytes | None:
        """What the client lacks of `url`, once it has answered the last response of the type: changes made
        while it digests one come together in the next, so a slow client gets fewer, larger responses
        instead of a queue of small ones it would apply one by one."""
        if not self.cache.knows(self.group, url):
            return None
        if stream.pending:
            stream.deferred = True
            return None
        resources = self.cache.resources(self.group, url)
        changed = None if stream.full else self.cache.changed_since(self.group, url, stream.seen)
        if changed is None:
            candidates = {*stream.sent, *(resources if stream.wildcard else stream.names), *stream.forced}
        else:
            candidates = {*changed, *stream.forced}
        upserts: list[VersionedResource] = []
        removed: list[str] = []
        sent, forced, rejected = stream.sent, stream.forced, stream.rejected
        names, wildcard = stream.names, stream.wildcard
        for name in candidates:
            wanted = resources.get(name) if wildcard or name in names else None
            if wanted is None:
                if name in sent or name in forced:
                    removed.append(name)
            elif (sent.get(name) != wanted.version or name in forced) and rejected.get(name) != wanted.version:
                upserts.append(wanted)
        since, stream.seen, stream.full = stream.seen, generation, False
        stream.forced.clear()
        if not upserts and not removed and not (since < 0 and stream.wildcard):
            return None  # a wildcard's first answer goes out even if empty: the client is waiting to sync
        return self._encode(url, stream, generation, upserts, removed, since)

    def _encode(
        self,
        url: str,
        stream: _TypeStream,
        generation: int,
        upserts: list[VersionedResource],
        removed: list[str],
        since: int,
    ) -> bytes:
        nonce = self.next_nonce()
        versions = {res.name: res.version for res in upserts}
        for name in (*versions, *removed):
            stream.acked.sending(name)
        stream.sent.update(versions)
        for name in removed:
            stream.sent.pop(name, None)
        if stream.rejected:
            for name in (*versions, *removed):
                stream.rejected.pop(name, None)
        entries, spans = encode_traced(upserts, url, self.group, self.server)
        stream.pending[nonce] = _Sent(versions, removed, spans)
        header = discovery_pb2.DeltaDiscoveryResponse(
            system_version_info=str(generation), type_url=url, nonce=nonce, removed_resources=removed
        )
        response = header.SerializeToString() + entries
        self.pushed(url, len(upserts) + len(removed), len(response), since)
        return response

    async def _settle(self, url: str, stream: _TypeStream, request: discovery_pb2.DeltaDiscoveryRequest) -> None:
        """Apply the client's verdict on one of our responses."""
        settled = stream.pending.pop(request.response_nonce, None)
        if settled is None:
            return
        if request.HasField("error_detail"):
            end_pushes(settled.spans, request.error_detail.message)
            rejected = blamed(settled.versions, stream.acked)
            stream.rejected.update(rejected)
            await self.nacked(url, rejected, request.error_detail.message)
            return
        end_pushes(settled.spans)
        for name, version in settled.versions.items():
            stream.acked.settle(name, version)
        for name in settled.removed:
            stream.acked.settle(name, None)
        await self.acked(url, stream.acked)

    async def closed(self) -> None:
        for stream in self.types.values():
            for sent in stream.pending.values():
                end_pushes(sent.spans, "the stream closed before the client answered")
        await super().closed()

    @staticmethod
    def _forget(stream: _TypeStream, name: str) -> None:
        """The client drops what it unsubscribed from; so do we."""
        stream.sent.pop(name, None)
        stream.acked.forget(name)
