"""Resources as the cache stores them: packed, content-versioned and encoded at most once."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import discovery_pb2
from google.protobuf import any_pb2, struct_pb2
from google.protobuf.message import Message

TypeUrl = str

_TYPE_URL_PREFIX = "type.googleapis.com/"
TRACE_METADATA = "meshplane.trace"
"""The `Resource.metadata.filter_metadata` entry holding the W3C trace context a delta resource carries."""


def type_url_of(message: Message | type[Message]) -> TypeUrl:
    """The xDS type URL of a message class or instance."""
    return _TYPE_URL_PREFIX + message.DESCRIPTOR.full_name


@dataclass(frozen=True, slots=True)
class VersionedResource:
    """A named resource whose version is its content hash, so equal content never looks like a change.

    Its wire encodings are memoised on first use: a resource is shared by every stream of every
    group that holds it, and none of them should encode it again. `trace` is the W3C context of the
    write it came from, if that write was traced; it is not part of the content.
    """

    name: str
    version: str
    body: any_pb2.Any
    trace: Mapping[str, str] | None = field(default=None, compare=False)
    _sotw: bytes | None = field(default=None, init=False, repr=False, compare=False)
    _delta: bytes | None = field(default=None, init=False, repr=False, compare=False)

    def sotw_entry(self) -> bytes:
        """This resource as one encoded ``resources`` entry of a ``DiscoveryResponse``."""
        if self._sotw is None:
            encoded = discovery_pb2.DiscoveryResponse(resources=[self.body]).SerializeToString()
            object.__setattr__(self, "_sotw", encoded)
            return encoded
        return self._sotw

    def delta_entry(self, trace: Mapping[str, str] | None = None) -> bytes:
        """This resource as one encoded ``resources`` entry of a ``DeltaDiscoveryResponse``.

        With `trace` (a W3C context, different for every push) the entry carries it in its metadata
        and is encoded afresh.
        """
        if trace:
            metadata = base_pb2.Metadata()
            metadata.filter_metadata[TRACE_METADATA].update(trace)
            entry = discovery_pb2.Resource(name=self.name, version=self.version, resource=self.body, metadata=metadata)
            return discovery_pb2.DeltaDiscoveryResponse(resources=[entry]).SerializeToString()
        if self._delta is None:
            entry = discovery_pb2.Resource(name=self.name, version=self.version, resource=self.body)
            encoded = discovery_pb2.DeltaDiscoveryResponse(resources=[entry]).SerializeToString()
            object.__setattr__(self, "_delta", encoded)
            return encoded
        return self._delta


def carried_trace(resource: discovery_pb2.Resource) -> dict[str, str] | None:
    """The W3C trace context a received delta resource carries, if any."""
    if TRACE_METADATA not in resource.metadata.filter_metadata:
        return None
    fields: struct_pb2.Struct = resource.metadata.filter_metadata[TRACE_METADATA]
    return {key: value for key, value in fields.items() if isinstance(value, str)} or None


def pack(name: str, message: Message, trace: Mapping[str, str] | None = None) -> VersionedResource:
    """Pack ``message`` into an Any, versioned by a hash of its type and deterministic encoding."""
    type_url = type_url_of(message)
    value = message.SerializeToString(deterministic=True)
    digest = hashlib.sha256(type_url.encode() + b"\n" + value).hexdigest()[:16]
    return VersionedResource(name, digest, any_pb2.Any(type_url=type_url, value=value), trace)
