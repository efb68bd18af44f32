"""A route's rules as Envoy routes, each under its precedence key, with the backends they send to and what
kept a reference from resolving (the route's ResolvedRefs).

A rule whose backends all fail to resolve (or weigh 0), or that has none and no redirect, answers 500; when
only some fail, their share of the requests answers 500, as the specification asks."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from envoy.config.route.v3 import route_components_pb2 as route_pb2
from google.protobuf import wrappers_pb2

from meshplane.agent.translate.common import duration
from meshplane.gatewayapi.backends import Backend, resolve
from meshplane.gatewayapi.filters import (
    apply_cors,
    apply_header_modifiers,
    apply_mirrors,
    apply_rewrite,
    of_type,
    redirect,
)
from meshplane.gatewayapi.matches import DEFAULT_HTTP_MATCH, grpc_match, http_match, path_prefix
from meshplane.gatewayapi.objects import (
    GRPC_ROUTE_KIND,
    HTTP_ROUTE_KIND,
    Listener,
    Unsupported,
    backend_ref,
    created,
    items,
    metadata,
    rules,
)
from meshplane.gatewayapi.state import GatewayApiState, KubeObject
from meshplane.model.durations import duration_seconds

UNRESOLVED_CLUSTER = "gwapi/unresolved-backend"
"""A cluster never defined: a weighted share sent there answers 500 (`cluster_not_found_response_code`)."""
HTTP_FILTERS = frozenset(
    {"RequestHeaderModifier", "ResponseHeaderModifier", "RequestRedirect", "URLRewrite", "RequestMirror", "CORS"}
)
BACKEND_FILTERS = frozenset({"RequestHeaderModifier", "ResponseHeaderModifier"})
GRPC_FILTERS = frozenset({"RequestHeaderModifier", "ResponseHeaderModifier", "RequestMirror"})
SortKey = tuple[Any, ...]


@dataclass
class RouteProgram:
    """What one route comes to, whatever it attaches to."""

    entries: list[tuple[SortKey, route_pb2.Route]] = field(default_factory=list)
    backends: dict[str, Backend] = field(default_factory=dict)
    unresolved: list[tuple[str, str]] = field(default_factory=list)
    """(reason, message) of each reference that did not resolve."""
    unsupported: list[tuple[str, str]] = field(default_factory=list)
    """(reason, message) of what keeps the route from being accepted (a filter this controller does not
    serve, filters that cannot go together)."""


class _Builder:
    def __init__(self, state: GatewayApiState, kind: str, route: KubeObject):
        self.state, self.kind, self.route = state, kind, route
        meta = metadata(route)
        self.namespace, self.name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        self.program = RouteProgram()

    def cluster(self, entry: Mapping[str, Any]) -> str | None:
        ref = backend_ref(entry, self.namespace)
        backend, reason = resolve(self.state, self.kind, self.namespace, ref, http2=self.kind == GRPC_ROUTE_KIND)
        if backend is None:
            self.program.unresolved.append((reason or "BackendNotFound", f"{ref.kind} {ref.namespace}/{ref.name}"))
            return None
        self.program.backends[backend.name] = backend
        return backend.name

    def action(self, rule: Mapping[str, Any]) -> route_pb2.RouteAction | None:
        """Where a rule's requests go: its backends by weight, a failed one's share to the undefined cluster.
        A backend with filters of its own keeps its share apart, its header modifiers applied there."""
        shares: dict[tuple[str, int], int] = {}
        own_filters: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
        for index, entry in enumerate(items(rule.get("backendRefs"))):
            name = self.cluster(entry) or UNRESOLVED_CLUSTER
            weight = backend_ref(entry, self.namespace).weight
            filters = items(entry.get("filters"))
            _check_filters(self.program, filters, BACKEND_FILTERS)
            slot = (name, index if filters else -1)
            if weight > 0:
                shares[slot] = shares.get(slot, 0) + weight
                own_filters[slot] = filters
        if not shares or {name for name, _ in shares} == {UNRESOLVED_CLUSTER}:
            return None
        action = route_pb2.RouteAction(cluster_not_found_response_code=route_pb2.RouteAction.INTERNAL_SERVER_ERROR)
        if len(shares) == 1 and not any(own_filters.values()):
            action.cluster = next(iter(shares))[0]
        else:
            for slot, weight in sorted(shares.items()):
                share = route_pb2.WeightedCluster.ClusterWeight(
                    name=slot[0], weight=wrappers_pb2.UInt32Value(value=weight)
                )
                apply_header_modifiers(share, own_filters[slot])
                action.weighted_clusters.clusters.append(share)
        _apply_timeouts(action, rule.get("timeouts"))
        return action

    def key(self, precedence: tuple[int, ...], rule_index: int, match_index: int) -> SortKey:
        return (precedence, created(self.route), self.namespace, self.name, rule_index, match_index)

    def entry_name(self, rule_index: int, match_index: int) -> str:
        return f"{self.namespace}/{self.name}/{rule_index}/{match_index}"

    def route_entry(
        self, rule_index: int, match_index: int, match: route_pb2.RouteMatch, action: route_pb2.RouteAction | None
    ) -> route_pb2.Route:
        route = route_pb2.Route(name=self.entry_name(rule_index, match_index), match=match)
        if action is None:
            route.direct_response.status = 500
        else:
            route.route.CopyFrom(action)
        return route


Entry = tuple[SortKey, route_pb2.Route]


def http_route_program(state: GatewayApiState, route: KubeObject, listener: Listener | None = None) -> RouteProgram:
    """The route's program; on `listener`, a redirect without a scheme or port keeps the listener's port."""
    builder = _Builder(state, HTTP_ROUTE_KIND, route)

    def build(rule_index: int, rule: Mapping[str, Any]) -> list[Entry]:
        filters = items(rule.get("filters"))
        _check_filters(builder.program, filters, HTTP_FILTERS)
        settings = of_type(filters, "RequestRedirect")
        if settings is not None and of_type(filters, "URLRewrite") is not None:
            raise Unsupported("a rule cannot both redirect and rewrite", reason="IncompatibleFilters")
        action = builder.action(rule) if settings is None else None
        entries = []
        for match_index, match in enumerate(items(rule.get("matches")) or [DEFAULT_HTTP_MATCH]):
            envoy_match, precedence = http_match(match)
            prefix = path_prefix(match)
            if settings is not None:
                entry = route_pb2.Route(name=builder.entry_name(rule_index, match_index), match=envoy_match)
                entry.redirect.CopyFrom(redirect(settings, prefix, listener))
            else:
                local = _copy(action)
                if local is not None:
                    rewrite = of_type(filters, "URLRewrite")
                    if rewrite is not None:
                        apply_rewrite(local, rewrite, prefix)
                    _mirror(builder, local, filters)
                entry = builder.route_entry(rule_index, match_index, envoy_match, local)
            apply_header_modifiers(entry, filters)
            apply_cors(entry, filters)
            entries.append((builder.key(precedence, rule_index, match_index), entry))
        return entries

    return _each_rule(builder, build)


def grpc_route_program(state: GatewayApiState, route: KubeObject, listener: Listener | None = None) -> RouteProgram:
    """The route's program, the same on every listener."""
    builder = _Builder(state, GRPC_ROUTE_KIND, route)

    def build(rule_index: int, rule: Mapping[str, Any]) -> list[Entry]:
        filters = items(rule.get("filters"))
        _check_filters(builder.program, filters, GRPC_FILTERS)
        action = builder.action(rule)
        entries = []
        for match_index, match in enumerate(items(rule.get("matches")) or [{}]):
            envoy_match, precedence = grpc_match(match)
            local = _copy(action)
            if local is not None:
                _mirror(builder, local, filters)
            entry = builder.route_entry(rule_index, match_index, envoy_match, local)
            apply_header_modifiers(entry, filters)
            entries.append((builder.key(precedence, rule_index, match_index), entry))
        return entries

    return _each_rule(builder, build)


def _each_rule(builder: _Builder, build: Callable[[int, Mapping[str, Any]], list[Entry]]) -> RouteProgram:
    """Every rule's entries; a rule with a value this controller cannot serve leaves the route unaccepted."""
    for rule_index, rule in enumerate(rules(builder.route)):
        try:
            builder.program.entries.extend(build(rule_index, rule))
        except Unsupported as problem:
            builder.program.unsupported.append((problem.reason, str(problem)))
    return builder.program


def _mirror(builder: _Builder, action: route_pb2.RouteAction, filters: list[Mapping[str, Any]]) -> None:
    apply_mirrors(action, filters, builder.cluster)


def _copy(action: route_pb2.RouteAction | None) -> route_pb2.RouteAction | None:
    if action is None:
        return None
    copied = route_pb2.RouteAction()
    copied.CopyFrom(action)
    return copied


def _check_filters(program: RouteProgram, filters: list[Mapping[str, Any]], served: frozenset[str]) -> None:
    for entry in filters:
        kind = str(entry.get("type") or "")
        if kind not in served:
            program.unsupported.append(("UnsupportedValue", f"filter {kind!r} is not served"))


def _apply_timeouts(action: route_pb2.RouteAction, timeouts: Any) -> None:
    """`request` bounds the whole request, `backendRequest` each try at a backend (never longer than the
    request); `0s` turns one off."""
    if not isinstance(timeouts, Mapping):
        return
    request, backend = timeouts.get("request"), timeouts.get("backendRequest")
    try:
        request_seconds = duration_seconds(str(request)) if request else None
        backend_seconds = duration_seconds(str(backend)) if backend else None
    except ValueError as problem:
        raise Unsupported(str(problem)) from problem
    if request_seconds and backend_seconds and backend_seconds > request_seconds:
        raise Unsupported(f"backendRequest timeout {backend} is longer than the request timeout {request}")
    if request or backend:
        action.timeout.CopyFrom(duration(str(request or backend)))
    if backend:
        action.retry_policy.num_retries.value = 0
        action.retry_policy.per_try_timeout.CopyFrom(duration(str(backend)))
