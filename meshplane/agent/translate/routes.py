"""The gateway's route table: virtual hosts by hostname, routes most specific first.

An API without operations gets one catch-all route for everything under its basePath. An API with
operations gets one route per operation (path pattern plus `:method`) and nothing else, so undeclared
paths and methods find no route and Envoy answers 404.

Route order, first match wins: longer basePath first; within one basePath, literal segments before
parameters before a final `*`, and operations before the catch-all; ties broken by path, method and
then API project/name, so the table never depends on input order. Hostnames only decide which APIs
a virtual host carries, not the order within it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from envoy.config.route.v3 import route_components_pb2, route_pb2
from envoy.type.matcher.v3 import string_pb2
from google.protobuf import wrappers_pb2

from meshplane.agent.translate.apis import Api
from meshplane.agent.translate.hosts import group_domains
from meshplane.agent.translate.memo import by_identity
from meshplane.agent.translate.paths import base_rewrite, route_match
from meshplane.agent.translate.route_policy import apply_host_rewrite, apply_route_policy
from meshplane.agent.translate.telemetry import name_route
from meshplane.model.kinds import Backend, Operation
from meshplane.model.paths import PathPattern, base_pattern, catch_all, operation_pattern

_SortKey = tuple[object, ...]
RouteHook = Callable[[Api, Operation | None, route_components_pb2.Route], None]
"""Adds an API's checks and limits to (a copy of) one of its routes."""
PreflightHook = Callable[
    [Api, route_components_pb2.RouteMatch, route_components_pb2.RouteAction], route_components_pb2.Route | None
]
"""The CORS preflight route of an API (given its catch-all match and its action), if it has one: a pure
function of the three, as its result is kept with the API's bare routes."""
VirtualHostHook = Callable[[route_components_pb2.VirtualHost], None]
"""Adds what holds for every route of a virtual host."""


def route_configuration(
    name: str,
    apis: Sequence[Api],
    decorate: RouteHook | None = None,
    preflight: PreflightHook | None = None,
    virtual_host: VirtualHostHook | None = None,
) -> route_pb2.RouteConfiguration:
    """One virtual host per group of domains served by the same APIs; no APIs, no virtual hosts (all 404).
    Each route is a copy of its API's bare route made in place in the table, then given this rebuild's
    checks and limits (once per virtual host carrying it)."""
    bare = {api.key: (api, _bare_routes(api, preflight)) for api in apis}
    table = route_pb2.RouteConfiguration(name=name)
    for domains, keys in group_domains({api.key: api.spec.hostnames for api in apis}):
        ordered = sorted(((entry, bare[key][0]) for key in keys for entry in bare[key][1]), key=lambda item: item[0][0])
        host = table.virtual_hosts.add(name=domains[0], domains=domains)
        for (_, op, checked, kept), api in ordered:
            route = host.routes.add()
            route.CopyFrom(kept)
            if checked and decorate is not None:
                decorate(api, op, route)
        if virtual_host is not None:
            virtual_host(host)
    return table


@by_identity
def _bare_routes(
    api: Api, preflight: PreflightHook | None
) -> tuple[tuple[_SortKey, Operation | None, bool, route_components_pb2.Route], ...]:
    """What an API's routes are before checks and limits: where they match, where they go and how they are
    named, with whether checks go on them (not on a preflight's). A pure function of the API (and the
    preflight hook), so kept per held API: what a rebuild pays for an unchanged API is the copy and its
    checks. Never changed once made: each rebuild decorates copies."""
    base = base_pattern(api.spec.base_path)
    action = _action(api, base) if api.unavailable is None else None
    operations: list[Operation | None] = list(api.spec.operations) or [None]
    routes = []
    for op in operations:
        pattern = operation_pattern(base, op.path) if op is not None else catch_all(base)
        key, route = _route(api, base, pattern, op, action)
        name_route(api, op, route)
        routes.append((key, op, True, route))
    if preflight is None or action is None:
        return tuple(routes)
    # An API with operations answers preflights for its own paths only, so another API on the same basePath
    # answers its own with its own policy; one without answers them under its whole basePath. Each goes
    # after the operations' (more specific or method-bound) routes, before a catch-all that takes any method.
    patterns = [(op.path, operation_pattern(base, op.path)) for op in api.spec.operations] or [("", catch_all(base))]
    for path, pattern in sorted(dict(patterns).items()):
        extra = preflight(api, route_match(pattern), action)
        if extra is not None:
            if path:
                extra.name = f"{extra.name} {path}"
            key = (-len(base.segments), base.specificity(), api.spec.base_path, pattern.specificity(), False)
            routes.append(((*key, path, "", api.project, api.name), None, False, extra))  # before an OPTIONS op
    return tuple(routes)


def _route(
    api: Api,
    base: PathPattern,
    pattern: PathPattern,
    op: Operation | None,
    action: route_components_pb2.RouteAction | None,
) -> tuple[_SortKey, route_components_pb2.Route]:
    """The route of one operation (or of the catch-all) to `action`; without one, a 503 saying why."""
    match = route_match(pattern)
    if op is not None:
        method = string_pb2.StringMatcher(exact=op.method.value)
        match.headers.append(route_components_pb2.HeaderMatcher(name=":method", string_match=method))
    key: _SortKey = (
        -len(base.segments),
        base.specificity(),
        api.spec.base_path,
        pattern.specificity(),
        op is None,
        op.path if op else "",
        op.method.value if op else "",
        api.project,
        api.name,
    )
    route = route_components_pb2.Route(name=route_name(api, op), match=match)
    if action is None:
        route.direct_response.status = 503
        route.direct_response.body.inline_string = f"{api.unavailable}\n"
    else:
        route.route.CopyFrom(action)
        apply_route_policy(api, op, route.route)
    return key, route


def route_name(api: Api, op: Operation | None) -> str:
    """`project/name METHOD path` for an operation's route, `project/name *` for an API's catch-all."""
    what = f"{op.method.value} {op.path}" if op else "*"
    return f"{api.project}/{api.name} {what}"


def _action(api: Api, base: PathPattern) -> route_components_pb2.RouteAction:
    """Where an API's requests go, and the Host they carry there. The rewrite uses the basePath all backends
    share; each route adds its timeouts and retries (see `route_policy`)."""
    serving = api.serving
    action = cluster_action(api, serving)
    rewrite = base_rewrite(base, serving[0][1].base_path)
    if rewrite is not None:
        action.regex_rewrite.CopyFrom(rewrite)
    apply_host_rewrite(serving, action)
    return action


def cluster_action(api: Api, backends: Sequence[tuple[int, Backend]]) -> route_components_pb2.RouteAction:
    """A route action to the clusters of `backends` (index, backend): one cluster, or split by weight."""
    action = route_components_pb2.RouteAction()
    if len(backends) == 1:
        action.cluster = api.cluster_name(backends[0][0])
    else:
        action.weighted_clusters.clusters.extend(
            route_components_pb2.WeightedCluster.ClusterWeight(
                name=api.cluster_name(index), weight=wrappers_pb2.UInt32Value(value=backend.weight)
            )
            for index, backend in backends
        )
    return action
