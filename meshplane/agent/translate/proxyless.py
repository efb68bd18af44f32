"""What proxyless gRPC clients consume: per API with gRPC backends, an API listener and its own route table.

A channel to `xds:///<api>.<project>` asks LDS for the listener of that name (an HTTP API listener, no
address), RDS for the route table it names, then CDS and EDS for the clusters the routes pick: the EDS
clusters the gateway uses too. gRPC's xDS client knows less than Envoy and checks other things, so these
resources carry only what it honours: clusters that are EDS over ADS (a hostname backend's STRICT_DNS
cluster is not one, so it is left to the gateway), prefix / path / regex matches, the router as the last
HTTP filter, and `max_stream_duration` where Envoy has a route `timeout`. gRPC cannot rewrite a path, so an
API whose backends take requests under another basePath gets no listener rather than one that forwards
to the wrong path.
"""

from __future__ import annotations

from collections.abc import Sequence

from envoy.config.listener.v3 import api_listener_pb2, listener_pb2
from envoy.config.route.v3 import route_components_pb2, route_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2

from meshplane.agent.translate.apis import Api
from meshplane.agent.translate.clusters import is_ip_literal
from meshplane.agent.translate.common import ads_source, packed
from meshplane.agent.translate.listener import router_filter
from meshplane.agent.translate.memo import by_identity
from meshplane.agent.translate.paths import base_rewrite, grpc_route_match
from meshplane.agent.translate.route_policy import route_timeout
from meshplane.agent.translate.routes import cluster_action, route_name
from meshplane.model.kinds import Backend, BackendProtocol, HttpMethod
from meshplane.model.paths import PathPattern, base_pattern, catch_all, operation_pattern
from meshplane.model.upstream import GRPC_RETRY_ON, retry_conditions


@by_identity
def proxyless_resources(api: Api) -> tuple[listener_pb2.Listener, route_pb2.RouteConfiguration] | None:
    """The API listener and route table for `xds:///<api>.<project>`, or None when no gRPC client can be
    served faithfully (no serving gRPC backend on an IP address, or a basePath rewrite). A pure function of
    the API, kept per held one; never changed once made."""
    backends = [
        (index, backend)
        for index, backend in api.serving
        if backend.protocol is BackendProtocol.GRPC and backend.host is not None and is_ip_literal(backend.host)
    ]
    base = base_pattern(api.spec.base_path)
    if not backends or base_rewrite(base, backends[0][1].base_path) is not None:
        return None
    return _api_listener(api), _route_configuration(api, base, backends)


def _api_listener(api: Api) -> listener_pb2.Listener:
    manager = hcm_pb2.HttpConnectionManager(
        stat_prefix=api.grpc_target,
        rds=hcm_pb2.Rds(config_source=ads_source(), route_config_name=api.grpc_route_config_name),
        http_filters=[router_filter()],
    )
    return listener_pb2.Listener(
        name=api.grpc_target, api_listener=api_listener_pb2.ApiListener(api_listener=packed(manager))
    )


def _route_configuration(
    api: Api, base: PathPattern, backends: Sequence[tuple[int, Backend]]
) -> route_pb2.RouteConfiguration:
    """One virtual host for the target and the API's hostnames (a client may set its own authority).

    Without operations, one route takes everything under the basePath. With operations, only POSTs become
    routes, as gRPC sends nothing else; most specific first, as on the gateway.
    """
    action = _action(api, backends)
    if api.spec.operations:
        posts = {op.path: op for op in api.spec.operations if op.method is HttpMethod.POST}
        patterns = {path: operation_pattern(base, path) for path in posts}
        ordered = sorted(posts, key=lambda path: (patterns[path].specificity(), path))
        matches = [(posts[path], grpc_route_match(patterns[path])) for path in ordered]
    else:
        matches = [(None, grpc_route_match(catch_all(base)))]
    routes = [route_components_pb2.Route(name=route_name(api, op), match=match, route=action) for op, match in matches]
    virtual_host = route_components_pb2.VirtualHost(
        name=api.grpc_target, domains=sorted({api.grpc_target, *api.spec.hostnames}), routes=routes
    )
    return route_pb2.RouteConfiguration(name=api.grpc_route_config_name, virtual_hosts=[virtual_host])


def _action(api: Api, backends: Sequence[tuple[int, Backend]]) -> route_components_pb2.RouteAction:
    """Timeout and retries come from the first gRPC backend, as the gateway's come from its first backend."""
    action = cluster_action(api, backends)
    first = backends[0][1]
    timeout = first.timeout or api.spec.timeout
    if timeout is not None:
        action.max_stream_duration.max_stream_duration.CopyFrom(route_timeout(timeout))
    if first.retries is not None:
        codes = [code for code in retry_conditions(first.retries.on) if code in GRPC_RETRY_ON]
        if codes:
            action.retry_policy.retry_on = ",".join(codes)
            action.retry_policy.num_retries.value = first.retries.attempts
    return action
