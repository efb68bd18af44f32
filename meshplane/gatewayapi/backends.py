"""`backendRefs` resolved to Services: the Envoy cluster a reference sends to, or why it sends nowhere."""

from __future__ import annotations

from dataclasses import dataclass

from meshplane.gatewayapi.objects import BackendRef
from meshplane.gatewayapi.references import permitted
from meshplane.gatewayapi.state import GROUP, Endpoint, GatewayApiState, ObjectKey

H2C_APP_PROTOCOLS = frozenset({"kubernetes.io/h2c", "h2c", "grpc"})


@dataclass(frozen=True)
class Backend:
    """A Service port as an Envoy cluster; its endpoints are the ready ones, at the port's target port."""

    name: str
    service: ObjectKey
    port_name: str
    http2: bool
    endpoints: tuple[tuple[str, int], ...]


def cluster_name(service: ObjectKey, port: int, http2: bool) -> str:
    return f"gwapi/{service[0]}/{service[1]}/{port}" + ("/h2" if http2 else "")


def resolve(
    state: GatewayApiState, route_kind: str, route_namespace: str, ref: BackendRef, *, http2: bool
) -> tuple[Backend | None, str | None]:
    """(backend, None), or (None, the ResolvedRefs reason: InvalidKind, RefNotPermitted, BackendNotFound)."""
    if (ref.group, ref.kind) != ("", "Service"):
        return None, "InvalidKind"
    service_key = (ref.namespace, ref.name)
    if not permitted(state.reference_grants, (GROUP, route_kind, route_namespace), ("", "Service", *service_key)):
        return None, "RefNotPermitted"
    service = state.services.get(service_key)
    if service is None:
        return None, "BackendNotFound"
    port = next((port for port in service.ports if port.port == ref.port), None)
    if port is None:
        return None, "BackendNotFound"
    wants_h2 = http2 or (port.app_protocol or "") in H2C_APP_PROTOCOLS
    return (
        Backend(
            name=cluster_name(service_key, port.port, wants_h2),
            service=service_key,
            port_name=port.name,
            http2=wants_h2,
            endpoints=_addresses(service.endpoints, port.name),
        ),
        None,
    )


def _addresses(endpoints: tuple[Endpoint, ...], port_name: str) -> tuple[tuple[str, int], ...]:
    """The ready endpoints' (address, target port), sorted; an endpoint without the port is left out."""
    return tuple(
        sorted((endpoint.address, endpoint.ports[port_name]) for endpoint in endpoints if port_name in endpoint.ports)
    )
