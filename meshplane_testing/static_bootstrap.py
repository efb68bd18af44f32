"""A translated config as a static Envoy bootstrap, so Envoy itself can check and serve it without an xDS server.

Routes and the discovered filters' configs are inlined into the listener, and EDS clusters carry their
ClusterLoadAssignment inline, so every resource the translator emits for Envoy passes through Envoy's own
validation. API listeners (and their
route tables) are for proxyless gRPC clients: Envoy skips them when they arrive over LDS, so they are left
out here. The rest (runtime, admin, the xDS cluster) is the agent's real bootstrap.
"""

from __future__ import annotations

import json
from typing import Any

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from google.protobuf import json_format
from google.protobuf.message import Message

from meshplane.agent.bootstrap import envoy_bootstrap
from meshplane.agent.translate import EnvoyConfig


def static_bootstrap(config: EnvoyConfig, *, admin_port: int = 0) -> dict[str, Any]:
    bootstrap = envoy_bootstrap("test", "127.0.0.1", 1, admin_port=admin_port)
    del bootstrap["dynamic_resources"]
    routes = {route.name: route for route in config.routes}
    discovered = {extension.name: extension.typed_config for extension in config.extension_configs}
    endpoints = {assignment.cluster_name: assignment for assignment in config.endpoints}
    bootstrap["static_resources"]["listeners"] = [
        _plain(_inline_routes(listener, routes, discovered))
        for listener in config.listeners
        if not listener.HasField("api_listener")
    ]
    bootstrap["static_resources"]["clusters"] += [_plain(_static(cluster, endpoints)) for cluster in config.clusters]
    return bootstrap


def _inline_routes(
    listener: listener_pb2.Listener, routes: dict[str, route_pb2.RouteConfiguration], discovered: dict[str, Any]
) -> listener_pb2.Listener:
    listener = listener_pb2.Listener.FromString(listener.SerializeToString())
    for chain in listener.filter_chains:
        for network_filter in chain.filters:
            manager = hcm_pb2.HttpConnectionManager()
            network_filter.typed_config.Unpack(manager)
            manager.route_config.CopyFrom(routes[manager.rds.route_config_name])
            for http_filter in manager.http_filters:
                if http_filter.HasField("config_discovery"):
                    http_filter.typed_config.CopyFrom(discovered[http_filter.name])
            network_filter.typed_config.Pack(manager)
    return listener


def _static(
    cluster: cluster_pb2.Cluster, endpoints: dict[str, endpoint_pb2.ClusterLoadAssignment]
) -> cluster_pb2.Cluster:
    if cluster.type != cluster_pb2.Cluster.EDS:
        return cluster
    static = cluster_pb2.Cluster()
    static.CopyFrom(cluster)
    static.ClearField("eds_cluster_config")
    static.type = cluster_pb2.Cluster.STATIC
    static.load_assignment.CopyFrom(endpoints[cluster.name])
    return static


def _plain(message: Message) -> dict[str, Any]:
    return json.loads(json_format.MessageToJson(message, preserving_proto_field_name=True))
