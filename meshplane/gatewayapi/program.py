"""`program(state)`: the GatewayClasses of our controller, their Gateways and the routes attached to them,
as Envoy resources and statuses. Pure and deterministic: the same state gives the same output, in name
order."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_components_pb2, route_pb2

from meshplane.gatewayapi.attachment import attach, namespace_allowed
from meshplane.gatewayapi.backends import Backend
from meshplane.gatewayapi.conflicts import CONFLICT_MESSAGE, Candidate, settle
from meshplane.gatewayapi.envoy import (
    AttachedRoute,
    ServedListener,
    backend_resources,
    by_type,
    certificate_secret,
    gateway_resources,
)
from meshplane.gatewayapi.listeners import ListenerVerdict, judge_listeners, mark_taken_ports
from meshplane.gatewayapi.objects import (
    GATEWAY_KIND,
    GRPC_ROUTE,
    HTTP_ROUTE,
    Kind,
    Listener,
    ParentRef,
    created,
    generation,
    listeners,
    parent_refs,
    route_hostnames,
    spec,
)
from meshplane.gatewayapi.rules import RouteProgram, SortKey, grpc_route_program, http_route_program
from meshplane.gatewayapi.state import GROUP, GatewayApiState, KubeObject, ObjectKey, Programmed, StatusKey
from meshplane.gatewayapi.status import condition


@dataclass
class _Gateway:
    key: ObjectKey
    obj: KubeObject
    verdicts: list[ListenerVerdict]
    attached: dict[str, list[AttachedRoute]] = field(default_factory=lambda: defaultdict(list))


SUPPORTED_VERSION = "v1.6.3"
"""The Gateway API release whose standard-channel CRDs this agent serves."""
CORE_FEATURES = frozenset({"Gateway", "HTTPRoute", "GRPCRoute", "ReferenceGrant"})
EXTENDED_FEATURES = frozenset(
    {
        "GatewayHTTPListenerIsolation",
        "GatewayPort8080",
        "GRPCRouteNamedRouteRule",
        "HTTPRoute303RedirectStatusCode",
        "HTTPRoute307RedirectStatusCode",
        "HTTPRoute308RedirectStatusCode",
        "HTTPRouteBackendProtocolH2C",
        "HTTPRouteBackendProtocolWebSocket",
        "HTTPRouteBackendRequestHeaderModification",
        "HTTPRouteBackendTimeout",
        "HTTPRouteCORS",
        "HTTPRouteDestinationPortMatching",
        "HTTPRouteHostRewrite",
        "HTTPRouteMethodMatching",
        "HTTPRouteNamedRouteRule",
        "HTTPRouteParentRefPort",
        "HTTPRoutePathRedirect",
        "HTTPRoutePathRewrite",
        "HTTPRoutePortRedirect",
        "HTTPRouteQueryParamMatching",
        "HTTPRouteRequestMirror",
        "HTTPRouteRequestMultipleMirrors",
        "HTTPRouteRequestPercentageMirror",
        "HTTPRouteRequestTimeout",
        "HTTPRouteResponseHeaderModification",
        "HTTPRouteSchemeRedirect",
    }
)
"""The extended features whose conformance tests pass (docs/conformance/); one joins only with its tests."""
SUPPORTED_FEATURES = CORE_FEATURES | EXTENDED_FEATURES
"""The features GatewayClasses announce, and the conformance run claims."""
RouteBuild = Callable[[GatewayApiState, KubeObject, Listener | None], RouteProgram]


class _RouteBuilds:
    """A route's program once for its statuses and backends, and once per listener protocol and port it
    attaches to (what a redirect keeps of the listener)."""

    def __init__(self, state: GatewayApiState, route: KubeObject, build: RouteBuild):
        self.state, self.route, self.build = state, route, build
        self.base = build(state, route, None)
        self._on: dict[tuple[str, int], RouteProgram] = {}

    def entries_on(self, listener: Listener) -> tuple[tuple[SortKey, route_components_pb2.Route], ...]:
        key = (listener.protocol, listener.port)
        if key not in self._on:
            self._on[key] = self.build(self.state, self.route, listener)
        return tuple(self._on[key].entries)


def program(state: GatewayApiState) -> Programmed:
    statuses: dict[StatusKey, Mapping[str, Any]] = {}
    ours = _our_classes(state, statuses)
    gateways = {
        key: _Gateway(key, gateway, judge_listeners(state, key, listeners(gateway)))
        for key, gateway in sorted(state.gateways.items())
        if spec(gateway).get("gatewayClassName") in ours
    }
    oldest_first = sorted((created(gateway.obj), key) for key, gateway in gateways.items())
    mark_taken_ports(
        [(state.addresses[key], gateways[key].verdicts) for _, key in oldest_first if key in state.addresses]
    )
    backends = _attach_routes(state, gateways, statuses)
    listeners_out: list[listener_pb2.Listener] = []
    tables: list[route_pb2.RouteConfiguration] = []
    for key, gateway in gateways.items():
        address = state.addresses.get(key)
        statuses[(GATEWAY_KIND, *key)] = _gateway_status(gateway, address)
        served = [
            ServedListener(
                verdict.listener, tuple(verdict.certificates), tuple(gateway.attached[verdict.listener.name])
            )
            for verdict in gateway.verdicts
            if verdict.serves
        ]
        if address is not None and served:
            built_listeners, built_tables = gateway_resources(key, address, served)
            listeners_out += built_listeners
            tables += built_tables
    certificates = {
        ref for gateway in gateways.values() for verdict in gateway.verdicts for ref in verdict.certificates
    }
    clusters, endpoints = backend_resources(backends)
    secrets = [certificate_secret(key, state.secrets[key]) for key in sorted(certificates) if key in state.secrets]
    return Programmed(
        resources=by_type(listeners_out, tables, clusters, endpoints, secrets),
        statuses=dict(sorted(statuses.items())),
        secrets_wanted=frozenset(certificates),
    )


def _attach_routes(
    state: GatewayApiState, gateways: Mapping[ObjectKey, _Gateway], statuses: dict[StatusKey, Mapping[str, Any]]
) -> dict[str, Backend]:
    """Every route on the listeners it attaches to (conflicts between kinds settled), its status written; the
    backends of those attached."""
    routes: list[tuple[Kind, ObjectKey, KubeObject, _RouteBuilds, list[tuple[ParentRef, Candidate, str | None]]]] = []
    for kind, objects, build in (
        (HTTP_ROUTE, state.http_routes, http_route_program),
        (GRPC_ROUTE, state.grpc_routes, grpc_route_program),
    ):
        for key, route in sorted(objects.items()):
            builds = _RouteBuilds(state, route, build)
            routes.append((kind, key, route, builds, _candidates(state, gateways, kind, key, route)))
    settle([candidate for *_, parents in routes for _, candidate, _ in parents])
    backends: dict[str, Backend] = {}
    for kind, key, route, builds, parents in routes:
        entries = [_parent_status(state, gateways, route, builds, *parent) for parent in parents]
        if entries:
            statuses[(kind.kind, *key)] = {"parents": entries}
        if any(candidate.attachments for _, candidate, _ in parents) and not builds.base.unsupported:
            backends.update(builds.base.backends)
    return backends


def _candidates(
    state: GatewayApiState, gateways: Mapping[ObjectKey, _Gateway], kind: Kind, key: ObjectKey, route: KubeObject
) -> list[tuple[ParentRef, Candidate, str | None]]:
    """Per parentRef naming a Gateway of ours, the listeners it attaches to, or the reason it attaches to none."""
    namespace = key[0]
    found = []
    for ref in parent_refs(route, namespace):
        gateway = gateways.get((ref.namespace, ref.name))
        if (ref.group, ref.kind) != (GROUP, GATEWAY_KIND) or gateway is None:
            continue
        valid = [(verdict.listener, verdict.kinds) for verdict in gateway.verdicts if verdict.attachable]
        allows = {
            listener.name: namespace_allowed(listener, gateway.key[0], namespace, state.namespaces)
            for listener, _ in valid
        }
        attachments, reason = attach(ref, valid, kind, route_hostnames(route), allows)
        candidate = Candidate(kind, (created(route), *key), gateway.key, attachments)
        found.append((ref, candidate, reason))
    return found


def _parent_status(
    state: GatewayApiState,
    gateways: Mapping[ObjectKey, _Gateway],
    route: KubeObject,
    builds: _RouteBuilds,
    ref: ParentRef,
    candidate: Candidate,
    reason: str | None,
) -> dict[str, Any]:
    """One `status.parents` entry; an accepted route joins the listeners it attached to."""
    observed = generation(route)
    built = builds.base
    if built.unsupported and reason is None:
        messages = "; ".join(message for _, message in built.unsupported)
        accepted = condition("Accepted", False, built.unsupported[0][0], messages, observed)
    elif reason is not None:
        accepted = condition("Accepted", False, reason, _REASON_MESSAGES[reason], observed)
    elif candidate.lost:
        accepted = condition("Accepted", False, "NotAllowedByListeners", CONFLICT_MESSAGE, observed)
    else:
        accepted = condition("Accepted", True, "Accepted", "attached", observed)
        gateway = gateways[candidate.gateway]
        for attachment in candidate.attachments:
            gateway.attached[attachment.listener.name].append(
                AttachedRoute(attachment.hostnames, builds.entries_on(attachment.listener))
            )
    if built.unresolved:
        reason_of, what = built.unresolved[0]
        resolved = condition("ResolvedRefs", False, reason_of, f"{what}: {_REF_MESSAGES[reason_of]}", observed)
    else:
        resolved = condition("ResolvedRefs", True, "ResolvedRefs", "every reference resolved", observed)
    return {"parentRef": dict(ref.raw), "controllerName": state.controller, "conditions": [accepted, resolved]}


def _our_classes(state: GatewayApiState, statuses: dict[StatusKey, Mapping[str, Any]]) -> set[str]:
    ours = set()
    for (_, name), gateway_class in sorted(state.gateway_classes.items()):
        if spec(gateway_class).get("controllerName") != state.controller:
            continue
        ours.add(name)
        observed = generation(gateway_class)
        accepted = condition("Accepted", True, "Accepted", "served by this agent", observed)
        version = condition("SupportedVersion", True, "SupportedVersion", f"CRDs {SUPPORTED_VERSION}", observed)
        statuses[("GatewayClass", "", name)] = {
            "conditions": [accepted, version],
            "supportedFeatures": [{"name": feature} for feature in sorted(SUPPORTED_FEATURES)],
        }
    return ours


_REASON_MESSAGES = {
    "NoMatchingParent": "no listener of the Gateway has this sectionName and port",
    "NotAllowedByListeners": "no listener allows this route (its namespace or its kind)",
    "NoMatchingListenerHostname": "no listener hostname matches the route's hostnames",
}
_REF_MESSAGES = {
    "InvalidKind": "only Services are served as backends",
    "RefNotPermitted": "no ReferenceGrant allows the reference",
    "BackendNotFound": "the Service or its port does not exist",
}


def _gateway_status(gateway: _Gateway, address: str | None) -> dict[str, Any]:
    observed = generation(gateway.obj)
    serving = [verdict for verdict in gateway.verdicts if verdict.serves]
    invalid = len(serving) < len(gateway.verdicts)
    if gateway.verdicts and not any(verdict.attachable for verdict in gateway.verdicts):
        accepted = condition("Accepted", False, "ListenersNotValid", "no listener is valid", observed)
    elif invalid:
        accepted = condition("Accepted", True, "ListenersNotValid", "some listeners are not valid", observed)
    else:
        accepted = condition("Accepted", True, "Accepted", "accepted", observed)
    if address is None:
        programmed = condition("Programmed", False, "AddressNotAssigned", "no address is assigned yet", observed)
    elif not serving:
        programmed = condition("Programmed", False, "Invalid", "no listener can be served", observed)
    else:
        programmed = condition("Programmed", True, "Programmed", f"served on {address}", observed)
    listener_statuses = [
        _listener_status(verdict, len(gateway.attached[verdict.listener.name]), address, observed)
        for verdict in gateway.verdicts
    ]
    return {
        "addresses": [{"type": "IPAddress", "value": address}] if address else [],
        "conditions": [accepted, programmed],
        "listeners": listener_statuses,
    }


def _listener_status(verdict: ListenerVerdict, attached: int, address: str | None, observed: int) -> dict[str, Any]:
    message = "; ".join(verdict.messages)
    accepted_reason = verdict.accepted
    conditions = [
        condition("Accepted", accepted_reason is None, accepted_reason or "Accepted", message or "accepted", observed),
        condition(
            "ResolvedRefs",
            verdict.resolved is None,
            verdict.resolved or "ResolvedRefs",
            message or "resolved",
            observed,
        ),
        condition(
            "Conflicted",
            verdict.conflicted is not None,
            verdict.conflicted or "NoConflicts",
            message or "no conflicts",
            observed,
        ),
    ]
    if not verdict.serves:
        conditions.append(condition("Programmed", False, "Invalid", message or "not served", observed))
    elif address is None:
        conditions.append(condition("Programmed", False, "Pending", "no address is assigned yet", observed))
    else:
        conditions.append(condition("Programmed", True, "Programmed", "served", observed))
    return {
        "name": verdict.listener.name,
        "supportedKinds": [kind.status() for kind in verdict.kinds],
        "attachedRoutes": attached,
        "conditions": conditions,
    }
