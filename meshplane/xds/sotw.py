"""State-of-the-world ADS: per type, resend the whole (or the requested) set when it changes."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from envoy.service.discovery.v3 import discovery_pb2

from meshplane.xds.resource import VersionedResource
from meshplane.xds.session import Session, blamed


class _Versions(Mapping[str, str]):
    """name -> version over an immutable resource mapping, without copying it."""

    __slots__ = ("_resources",)

    def __init__(self, resources: Mapping[str, VersionedResource]) -> None:
        self._resources = resources

    def __getitem__(self, name: str) -> str:
        return self._resources[name].version

    def __iter__(self) -> Iterator[str]:
        return iter(self._resources)

    def __len__(self) -> int:
        return len(self._resources)


class _TypeStream:
    """One type on one SotW stream. ``names`` None means wildcard."""

    __slots__ = ("acked", "explicit", "names", "nonce", "seen", "sent", "sent_names", "sent_version", "settled")

    def __init__(self) -> None:
        self.explicit = False  # once names were requested, an empty list means "none", not wildcard
        self.names: frozenset[str] | None = None
        self.nonce = ""
        self.settled = True  # the client has ACKed or NACKed the latest response already
        self.sent: Mapping[str, str] = {}
        self.acked: Mapping[str, str] = {}
        """What the client holds: the set of the last response it ACKed (on this stream)."""
        self.sent_names: frozenset[str] | None = None
        # A NACKed version stays here too, so it is not sent again until the cache moves on.
        self.sent_version: str | None = None
        self.seen = -1  # cache generation this type was last looked at; -1 = never answered


class SotwSession(Session[discovery_pb2.DiscoveryRequest, _TypeStream]):
    """One StreamAggregatedResources stream."""

    async def receive(self, request: discovery_pb2.DiscoveryRequest) -> bool:
        url = request.type_url
        stream = self.types.get(url)
        first = stream is None
        if stream is None:
            stream = _TypeStream()
            self.track(url, stream)
        elif request.response_nonce:
            if request.response_nonce != stream.nonce:
                return False  # stale: a newer response is on its way and its ACK will speak for the client
            if not stream.settled:  # later requests may repeat the nonce just to change names
                stream.settled = True
                if request.HasField("error_detail"):
                    await self.nacked(url, blamed(stream.sent, stream.acked), request.error_detail.message)
                else:
                    stream.acked = stream.sent
                    await self.acked(url, stream.sent)
        names = frozenset(request.resource_names)
        before = stream.names
        stream.explicit = stream.explicit or bool(names)
        stream.names = None if "*" in names or not stream.explicit else names
        if first and stream.names is None and request.version_info:
            # A reconnecting wildcard client: versions are content hashes, so equal means current.
            stream.sent_version = request.version_info
        return first or stream.names != before

    def respond(self, generation: int) -> list[bytes]:
        responses = []
        for url in self.type_urls:
            stream = self.types[url]
            version = self.cache.version(self.group, url)
            if version is None:
                continue
            since, stream.seen = stream.seen, generation
            if version == stream.sent_version and stream.names == stream.sent_names:
                continue
            resources = self.cache.resources(self.group, url)
            sent: Mapping[str, str]
            if stream.names is None:
                entries, sent = self.cache.sotw_entries(self.group, url), _Versions(resources)
            else:
                chosen = [res for name in stream.names if (res := resources.get(name)) is not None]
                sent = {res.name: res.version for res in chosen}
                if stream.names == stream.sent_names and sent == stream.sent:
                    stream.sent_version = version  # other resources of the type changed, not these
                    continue
                entries = b"".join(res.sotw_entry() for res in chosen)
            stream.nonce, stream.settled = self.next_nonce(), False
            stream.sent, stream.sent_names, stream.sent_version = sent, stream.names, version
            header = discovery_pb2.DiscoveryResponse(version_info=version, type_url=url, nonce=stream.nonce)
            responses.append(header.SerializeToString() + entries)
            self.pushed(url, len(sent), len(responses[-1]), since)
        return responses
