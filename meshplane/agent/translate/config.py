"""What the translator is told about the gateway, and the Envoy resources it hands back."""

from __future__ import annotations

from dataclasses import dataclass

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_pb2


@dataclass(frozen=True)
class GatewaySettings:
    """Where the gateway listens and the names its listener and route table go by."""

    listener_address: str = "127.0.0.1"
    listener_port: int = 10000
    listener_name: str = "gateway"
    route_config_name: str = "gateway"


@dataclass(frozen=True)
class EnvoyConfig:
    """One snapshot of everything the agent serves over xDS, to its gateways and to proxyless gRPC clients
    alike (each subscribes to what it uses); every list is sorted by resource name."""

    listeners: list[listener_pb2.Listener]
    routes: list[route_pb2.RouteConfiguration]
    clusters: list[cluster_pb2.Cluster]
    endpoints: list[endpoint_pb2.ClusterLoadAssignment]
