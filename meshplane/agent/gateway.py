"""Publishes the translated Envoy configuration to the agent's gateways, make-before-break.

A change first adds new clusters beside the ones still in use, then switches listeners and routes,
and removes clusters only once every connected gateway has acknowledged the routes that no longer
use them: no request ever meets a route whose cluster is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping

import grpc
from envoy.config.core.v3 import base_pb2

from meshplane.agent.translate import EnvoyConfig
from meshplane.observability.metrics import GATEWAY_PUBLISHES
from meshplane.xds.cache import ResourceCache
from meshplane.xds.resource import VersionedResource, pack
from meshplane.xds.server import NoCallbacks

LISTENER = "type.googleapis.com/envoy.config.listener.v3.Listener"
ROUTE = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
CLUSTER = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
ENDPOINT = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
ENVOY_TYPE_ORDER = (CLUSTER, ENDPOINT, LISTENER, ROUTE)
GATEWAYS = "gateways"


def gateway_group(node: base_pb2.Node, context: grpc.aio.ServicerContext) -> str:
    """Every gateway of a cluster serves the same configuration."""
    return GATEWAYS


def _packed(messages: list, key: str = "name") -> dict[str, VersionedResource]:
    return {getattr(m, key): pack(getattr(m, key), m) for m in messages}


class GatewayPublisher(NoCallbacks):
    def __init__(self, cache: ResourceCache, ack_timeout: float = 5.0):
        self.cache = cache
        self.ack_timeout = ack_timeout
        self._lock = asyncio.Lock()
        self._acked_routes: dict[str, dict[str, str]] = {}
        self._changed = asyncio.Condition()

    async def publish(self, config: EnvoyConfig) -> None:
        async with self._lock:
            clusters = _packed(config.clusters)
            endpoints = _packed(config.endpoints, "cluster_name")
            routes = _packed(config.routes)
            listeners = _packed(config.listeners)
            kept_clusters = {**self.cache.resources(GATEWAYS, CLUSTER), **clusters}
            kept_endpoints = {**self.cache.resources(GATEWAYS, ENDPOINT), **endpoints}
            self.cache.set_snapshot(
                GATEWAYS, {CLUSTER: kept_clusters, ENDPOINT: kept_endpoints, LISTENER: listeners, ROUTE: routes}
            )
            GATEWAY_PUBLISHES.inc()
            if kept_clusters.keys() != clusters.keys() or kept_endpoints.keys() != endpoints.keys():
                await self._wait_routes_acked(routes)
                self.cache.set_snapshot(
                    GATEWAYS, {CLUSTER: clusters, ENDPOINT: endpoints, LISTENER: listeners, ROUTE: routes}
                )

    async def _wait_routes_acked(self, routes: Mapping[str, VersionedResource]) -> None:
        wanted = {name: r.version for name, r in routes.items()}

        def all_acked() -> bool:
            return all(
                all(acked.get(name) == version for name, version in wanted.items())
                for acked in self._acked_routes.values()
            )

        async with self._changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait_for(all_acked), self.ack_timeout)

    async def on_stream_open(self, node: base_pb2.Node, group: str, delta: bool) -> None:
        async with self._changed:
            self._acked_routes.setdefault(node.id, {})

    async def on_stream_close(self, node: base_pb2.Node, group: str) -> None:
        async with self._changed:
            self._acked_routes.pop(node.id, None)
            self._changed.notify_all()

    async def on_ack(self, group: str, node: base_pb2.Node, type_url: str, versions: Mapping[str, str]) -> None:
        if type_url != ROUTE:
            return
        async with self._changed:
            self._acked_routes.setdefault(node.id, {}).update(versions)
            self._changed.notify_all()
