"""A Gateway's listeners judged one by one: the protocol, the route kinds, the certificates (and whether a
ReferenceGrant lets the Gateway use them), and conflicts with the listeners sharing its port."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from meshplane.gatewayapi.objects import GRPC_ROUTE, HTTP_ROUTE, Kind, Listener, items
from meshplane.gatewayapi.references import permitted
from meshplane.gatewayapi.state import GROUP, GatewayApiState, ObjectKey

SUPPORTED_KINDS = {"HTTP": (HTTP_ROUTE, GRPC_ROUTE), "HTTPS": (HTTP_ROUTE, GRPC_ROUTE)}
"""The route kinds each protocol serves, in the order `supportedKinds` lists them."""


@dataclass
class ListenerVerdict:
    """What a listener comes to: the kinds it accepts, the secrets it serves, and its conditions' reasons
    (None for the positive one)."""

    listener: Listener
    kinds: list[Kind] = field(default_factory=list)
    certificates: list[ObjectKey] = field(default_factory=list)
    accepted: str | None = None
    resolved: str | None = None
    conflicted: str | None = None
    messages: list[str] = field(default_factory=list)

    @property
    def attachable(self) -> bool:
        """Whether routes attach to it (and count in its `attachedRoutes`), served or not."""
        return self.accepted is None and self.conflicted is None

    @property
    def serves(self) -> bool:
        """Whether Envoy serves it: attachable, with every certificate at hand."""
        return self.attachable and self.resolved in (None, "InvalidRouteKinds")


def judge_listeners(
    state: GatewayApiState, gateway_key: ObjectKey, listeners: Sequence[Listener]
) -> list[ListenerVerdict]:
    verdicts = [_judge(state, gateway_key, listener) for listener in listeners]
    _mark_conflicts(verdicts)
    return verdicts


def _judge(state: GatewayApiState, gateway_key: ObjectKey, listener: Listener) -> ListenerVerdict:
    verdict = ListenerVerdict(listener)
    supported = SUPPORTED_KINDS.get(listener.protocol)
    if supported is None:
        verdict.accepted = "UnsupportedProtocol"
        verdict.messages.append(f"protocol {listener.protocol!r} is not served; HTTP and HTTPS are")
        return verdict
    if listener.port in state.unavailable_ports.get(gateway_key, frozenset()):
        verdict.accepted = "PortUnavailable"
        verdict.messages.append(f"port {listener.port} cannot be served on this Gateway's address")
        return verdict
    _route_kinds(verdict, supported)
    if listener.protocol == "HTTPS":
        _certificates(state, gateway_key, verdict)
    return verdict


def _route_kinds(verdict: ListenerVerdict, supported: Sequence[Kind]) -> None:
    asked = items(verdict.listener.allowed_routes.get("kinds"))
    if not asked:
        verdict.kinds = list(supported)
        return
    for entry in asked:
        kind = Kind(str(entry.get("group", GROUP)), str(entry.get("kind") or ""))
        if kind in supported:
            if kind not in verdict.kinds:
                verdict.kinds.append(kind)
        else:
            verdict.resolved = "InvalidRouteKinds"
            verdict.messages.append(f"route kind {kind.group}/{kind.kind} is not served on this listener")


def _certificates(state: GatewayApiState, gateway_key: ObjectKey, verdict: ListenerVerdict) -> None:
    tls = verdict.listener.tls
    if (tls.get("mode") or "Terminate") != "Terminate":
        verdict.accepted = "UnsupportedValue"
        verdict.messages.append(f"TLS mode {tls.get('mode')!r} is not served; Terminate is")
        return
    refs = items(tls.get("certificateRefs"))
    if not refs:
        verdict.resolved = "InvalidCertificateRef"
        verdict.messages.append("an HTTPS listener needs a certificateRef")
    namespace = gateway_key[0]
    for ref in refs:
        group, kind = str(ref.get("group") or ""), str(ref.get("kind") or "Secret")
        key = (str(ref.get("namespace") or namespace), str(ref.get("name") or ""))
        if (group, kind) != ("", "Secret"):
            verdict.resolved = "InvalidCertificateRef"
            verdict.messages.append(f"certificateRef {group}/{kind} {key[1]} is not a Secret")
        elif not permitted(state.reference_grants, (GROUP, "Gateway", namespace), ("", "Secret", *key)):
            verdict.resolved = "RefNotPermitted"
            verdict.messages.append(f"no ReferenceGrant lets the Gateway use Secret {key[0]}/{key[1]}")
        elif key not in state.secrets:
            verdict.certificates.append(key)
            verdict.resolved = verdict.resolved or "InvalidCertificateRef"
            verdict.messages.append(f"Secret {key[0]}/{key[1]} is missing or not a valid kubernetes.io/tls Secret")
        else:
            verdict.certificates.append(key)


def _mark_conflicts(verdicts: Sequence[ListenerVerdict]) -> None:
    """Listeners on one port must share a protocol, and their hostnames must differ."""
    by_port: dict[int, list[ListenerVerdict]] = defaultdict(list)
    for verdict in verdicts:
        if verdict.accepted is None:
            by_port[verdict.listener.port].append(verdict)
    for sharing in by_port.values():
        if len({verdict.listener.protocol for verdict in sharing}) > 1:
            for verdict in sharing:
                verdict.conflicted = "ProtocolConflict"
                verdict.messages.append(f"port {verdict.listener.port} is used with another protocol")
            continue
        counts = Counter(verdict.listener.hostname for verdict in sharing)
        for verdict in sharing:
            if counts[verdict.listener.hostname] > 1:
                verdict.conflicted = "HostnameConflict"
                verdict.messages.append("another listener on this port has the same hostname")


def mark_taken_ports(gateways: Sequence[tuple[str, Sequence[ListenerVerdict]]]) -> None:
    """Gateways (address, verdicts), oldest first: a port of an address an older Gateway serves is not
    available to a younger one given the same address, so Envoy never meets two listeners on one socket."""
    taken: dict[tuple[str, int], int] = {}
    for index, (address, verdicts) in enumerate(gateways):
        for verdict in verdicts:
            if verdict.accepted is not None:
                continue
            owner = taken.setdefault((address, verdict.listener.port), index)
            if owner != index:
                verdict.accepted = "PortUnavailable"
                verdict.messages.append(f"{address}:{verdict.listener.port} is served for another Gateway")
