"""Typed views of the raw Gateway API objects: only the fields `program` reads, with the specification's
defaults filled in, and anything unknown ignored (a newer CRD may carry fields this agent does not know)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from meshplane.gatewayapi.state import GROUP, KubeObject

GATEWAY_KIND = "Gateway"
HTTP_ROUTE_KIND = "HTTPRoute"
GRPC_ROUTE_KIND = "GRPCRoute"


class Unsupported(ValueError):
    """A value this controller cannot serve (a regular expression Envoy's RE2 refuses, a malformed duration):
    its route is not accepted, and the others are served all the same. `reason` is its Accepted condition's."""

    def __init__(self, message: str, reason: str = "UnsupportedValue"):
        super().__init__(message)
        self.reason = reason


def number(value: Any) -> int | None:
    """An integer field; None when missing or malformed."""
    if isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def mapping(value: Any) -> Mapping[str, Any]:
    """A mapping field; missing or malformed: empty."""
    return value if isinstance(value, Mapping) else {}


def _sequence(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list | tuple) else ()


def spec(obj: KubeObject) -> Mapping[str, Any]:
    return mapping(obj.get("spec"))


def metadata(obj: KubeObject) -> Mapping[str, Any]:
    return mapping(obj.get("metadata"))


def generation(obj: KubeObject) -> int:
    return number(metadata(obj).get("generation")) or 0


def created(obj: KubeObject) -> str:
    """The creationTimestamp (RFC 3339 in UTC, so it sorts as text)."""
    return str(metadata(obj).get("creationTimestamp") or "")


def items(value: Any) -> list[Mapping[str, Any]]:
    """The mappings of a list field (missing or malformed: none)."""
    return [mapping(item) for item in _sequence(value) if isinstance(item, Mapping)]


def strings(value: Any) -> list[str]:
    return [str(item) for item in _sequence(value)]


@dataclass(frozen=True)
class Kind:
    group: str
    kind: str

    def status(self) -> dict[str, str]:
        return {"group": self.group, "kind": self.kind}


HTTP_ROUTE = Kind(GROUP, HTTP_ROUTE_KIND)
GRPC_ROUTE = Kind(GROUP, GRPC_ROUTE_KIND)


@dataclass(frozen=True)
class Listener:
    name: str
    port: int
    protocol: str
    hostname: str | None
    tls: Mapping[str, Any]
    allowed_routes: Mapping[str, Any]


def listeners(gateway: KubeObject) -> list[Listener]:
    return [
        Listener(
            name=str(entry.get("name") or ""),
            port=number(entry.get("port")) or 0,
            protocol=str(entry.get("protocol") or ""),
            hostname=str(entry["hostname"]) if entry.get("hostname") else None,
            tls=mapping(entry.get("tls")),
            allowed_routes=mapping(entry.get("allowedRoutes")),
        )
        for entry in items(spec(gateway).get("listeners"))
    ]


@dataclass(frozen=True)
class ParentRef:
    """A route's `parentRefs` entry, the namespace defaulted to the route's; `raw` is echoed in its status."""

    group: str
    kind: str
    namespace: str
    name: str
    section_name: str | None
    port: int | None
    raw: Mapping[str, Any]


def parent_refs(route: KubeObject, route_namespace: str) -> list[ParentRef]:
    refs = []
    for entry in items(spec(route).get("parentRefs")):
        refs.append(
            ParentRef(
                group=str(entry.get("group", GROUP)),
                kind=str(entry.get("kind") or GATEWAY_KIND),
                namespace=str(entry.get("namespace") or route_namespace),
                name=str(entry.get("name") or ""),
                section_name=str(entry["sectionName"]) if entry.get("sectionName") else None,
                port=number(entry.get("port")),
                raw=dict(entry),
            )
        )
    return refs


@dataclass(frozen=True)
class BackendRef:
    """A `backendRefs` (or mirror) entry, the namespace defaulted to the route's."""

    group: str
    kind: str
    namespace: str
    name: str
    port: int | None
    weight: int


def backend_ref(entry: Mapping[str, Any], route_namespace: str) -> BackendRef:
    weight = number(entry.get("weight"))
    return BackendRef(
        group=str(entry.get("group") or ""),
        kind=str(entry.get("kind") or "Service"),
        namespace=str(entry.get("namespace") or route_namespace),
        name=str(entry.get("name") or ""),
        port=number(entry.get("port")),
        weight=1 if weight is None else weight,
    )


def route_hostnames(route: KubeObject) -> list[str]:
    return strings(spec(route).get("hostnames"))


def rules(route: KubeObject) -> list[Mapping[str, Any]]:
    return items(spec(route).get("rules"))
