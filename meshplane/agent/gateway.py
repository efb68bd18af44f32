"""Publishes the translated Envoy configuration to the agent's gateways, make-before-break, and tells
whether the gateways took it.

A change first adds new clusters beside the ones still in use and waits until every connected
gateway holds them with their endpoints (so they have warmed), then switches listeners and routes,
and removes clusters only once the routes that no longer use them are acknowledged: no request ever
meets a route whose cluster is missing or still warming.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

import grpc
from envoy.config.core.v3 import base_pb2
from google.protobuf.message import Message
from opentelemetry.trace import Status, StatusCode

from meshplane.agent.translate import EnvoyConfig
from meshplane.agent.translate.extensions import EXTENSION_CONFIG_TYPE
from meshplane.agent.translate.gateways import SECRET_TYPE
from meshplane.dataplane import ENFORCER_NODE_CLUSTER, RATELIMITER_NODE_CLUSTER
from meshplane.lifecycle import wait_at_most
from meshplane.model.status import DeliveryState
from meshplane.observability.metrics import GATEWAY_PUBLISHES
from meshplane.observability.tracing import tracer
from meshplane.xds.cache import ResourceCache
from meshplane.xds.resource import VersionedResource, pack
from meshplane.xds.server import NoCallbacks

LISTENER = "type.googleapis.com/envoy.config.listener.v3.Listener"
ROUTE = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
CLUSTER = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
ENDPOINT = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
EXTENSION_CONFIG = EXTENSION_CONFIG_TYPE
# Secrets first (a listener or cluster naming one waits for it); filter configs before routes: a new route
# may name a JWT requirement only the new config has.
ENVOY_TYPE_ORDER = (SECRET_TYPE, CLUSTER, ENDPOINT, LISTENER, EXTENSION_CONFIG, ROUTE)
GATEWAYS = "gateways"

Wanted = dict[str, dict[str, str]]
"""type URL -> resource name -> version."""


ENFORCERS = "enforcers"
RATELIMITERS = "ratelimiters"
_SERVICE_GROUPS = {ENFORCER_NODE_CLUSTER: ENFORCERS, RATELIMITER_NODE_CLUSTER: RATELIMITERS}


def gateway_group(node: base_pb2.Node, context: grpc.aio.ServicerContext) -> str:
    """Every gateway of a cluster serves the same configuration; enforcers and rate limiters (known by the
    cluster their node announces) get theirs."""
    return _SERVICE_GROUPS.get(node.cluster, GATEWAYS)


_CONFIG_FIELDS = {
    LISTENER: "listeners",
    ROUTE: "routes",
    CLUSTER: "clusters",
    ENDPOINT: "endpoints",
    SECRET_TYPE: "secrets",
    EXTENSION_CONFIG: "extension_configs",
}


def with_resources(config: EnvoyConfig, resources: Mapping[str, Mapping[str, Message]]) -> EnvoyConfig:
    """`config` and more resources beside its own (names that never meet the translator's), in one snapshot."""
    more = {
        _CONFIG_FIELDS[type_url]: [*getattr(config, _CONFIG_FIELDS[type_url]), *(m for _, m in sorted(named.items()))]
        for type_url, named in resources.items()
        if named
    }
    return dataclasses.replace(config, **more) if more else config


class _Packer:
    """Packs a configuration's messages, reusing the packing of each message the last configuration also
    had: the translator shares the messages of unchanged held objects from one translation to the next, and
    serializing and hashing them again is most of what publishing a large catalog costs."""

    def __init__(self) -> None:
        self._last: dict[int, tuple[Message, VersionedResource]] = {}
        self._now: dict[int, tuple[Message, VersionedResource]] = {}

    def packed(self, messages: list, key: str = "name") -> dict[str, VersionedResource]:
        out = {}
        for message in messages:
            entry = self._last.get(id(message))
            if entry is None or entry[0] is not message:
                entry = (message, pack(getattr(message, key), message))
            self._now[id(message)] = entry
            out[entry[1].name] = entry[1]
        return out

    def done(self) -> None:
        """The configuration is packed: keep its packings (holding its messages), drop the older ones."""
        self._last, self._now = self._now, {}


@dataclass(frozen=True)
class PublishOutcome:
    """Applied: every gateway acknowledged it (or none is connected); Failed: one rejected it (Envoy's
    message); Pending: no answer within the wait."""

    state: DeliveryState
    message: str = ""


@dataclass
class _NodeView:
    acked: dict[str, dict[str, str]] = field(default_factory=dict)
    rejected: dict[str, dict[str, tuple[str, str]]] = field(default_factory=dict)


class GatewayPublisher(NoCallbacks):
    def __init__(
        self,
        cache: ResourceCache,
        listener_name: str = "gateway",
        route_config_name: str = "gateway",
        ack_timeout: float = 5.0,
    ):
        self.cache = cache
        self.listener_name = listener_name
        self.route_config_name = route_config_name
        self.ack_timeout = ack_timeout
        self._lock = asyncio.Lock()
        self._nodes: dict[str, _NodeView] = {}
        self._changed = asyncio.Condition()
        self._packer = _Packer()

    @property
    def connected(self) -> int:
        """Gateways with an open stream: a publish with none connected is Applied at once."""
        return len(self._nodes)

    async def publish(self, config: EnvoyConfig) -> PublishOutcome:
        """Three steps, each acknowledged before the next: new clusters and endpoints join the old ones
        (and warm), listeners and routes switch, then clusters no longer used go. A step that changes
        nothing is skipped; a rejection stops the sequence with the gateway's message.

        Traced as one span that ends with the gateways' verdict: a rejection is its error, in Envoy's words.
        """
        with tracer().start_as_current_span("meshplane.gateway.ack") as span:
            outcome = await self._publish(config)
            GATEWAY_PUBLISHES.labels(outcome.state.value.lower()).inc()
            span.set_attribute("meshplane.gateways", self.connected)
            span.set_attribute("meshplane.outcome", outcome.state.value)
            if outcome.state is DeliveryState.FAILED:
                span.set_status(Status(StatusCode.ERROR, outcome.message))
            return outcome

    async def _publish(self, config: EnvoyConfig) -> PublishOutcome:
        async with self._lock:
            packer = self._packer
            clusters = packer.packed(config.clusters)
            endpoints = packer.packed(config.endpoints, "cluster_name")
            secrets = packer.packed(config.secrets)
            final = {
                SECRET_TYPE: secrets,
                CLUSTER: clusters,
                ENDPOINT: endpoints,
                LISTENER: packer.packed(config.listeners),
                EXTENSION_CONFIG: packer.packed(config.extension_configs),
                ROUTE: packer.packed(config.routes),
            }
            packer.done()
            served = {type_url: dict(self.cache.resources(GATEWAYS, type_url)) for type_url in ENVOY_TYPE_ORDER}
            kept = {
                SECRET_TYPE: {**served[SECRET_TYPE], **secrets},
                CLUSTER: {**served[CLUSTER], **clusters},
                ENDPOINT: {**served[ENDPOINT], **endpoints},
            }
            steps = [{**served, **kept}, {**final, **kept}, final]
            previous = served
            outcome = await self._verdict(_versions(served))
            for step in steps:
                if step == previous:
                    continue
                self.cache.set_snapshot(GATEWAYS, step)
                outcome = await self._verdict(_versions(step))
                if outcome.state is DeliveryState.FAILED:
                    return outcome
                previous = step
            return outcome

    async def _verdict(self, wanted: Wanted) -> PublishOutcome:
        """Wait until every gateway holds `wanted` or one rejected part of it, at most ack_timeout."""
        outcome: PublishOutcome | None = None

        def settled() -> bool:
            nonlocal outcome
            outcome = self._judge(wanted)
            return outcome is not None

        async with self._changed:
            await wait_at_most(self.ack_timeout, self._changed.wait_for(settled))
        return outcome or PublishOutcome(DeliveryState.PENDING, "gateways have not acknowledged the configuration yet")

    def _judge(self, wanted: Wanted) -> PublishOutcome | None:
        waiting = False
        for view in self._nodes.values():
            for type_url, names in wanted.items():
                rejected = view.rejected.get(type_url, {})
                for name, version in names.items():
                    if name in rejected and rejected[name][0] == version:
                        return PublishOutcome(DeliveryState.FAILED, rejected[name][1])
            if self.listener_name in view.acked.get(LISTENER, {}) and not self._gateway_holds(view, wanted):
                waiting = True
        return None if waiting else PublishOutcome(DeliveryState.APPLIED)

    def _gateway_holds(self, view: _NodeView, wanted: Wanted) -> bool:
        """An Envoy gateway asks for every listener, cluster and endpoint, but only for its own route
        table (the others are for proxyless gRPC clients), and only for the secrets of listeners it holds
        (it warms a listener until they come)."""
        for type_url, names in wanted.items():
            if type_url == SECRET_TYPE:
                continue
            acked = view.acked.get(type_url, {})
            for name, version in names.items():
                if (type_url != ROUTE or name == self.route_config_name) and acked.get(name) != version:
                    return False
        return True

    async def on_stream_open(self, node: base_pb2.Node, group: str, delta: bool) -> None:
        async with self._changed:
            self._nodes[node.id] = _NodeView()

    async def on_stream_close(self, node: base_pb2.Node, group: str) -> None:
        async with self._changed:
            self._nodes.pop(node.id, None)
            self._changed.notify_all()

    async def on_ack(self, group: str, node: base_pb2.Node, type_url: str, versions: Mapping[str, str]) -> None:
        async with self._changed:
            self._nodes.setdefault(node.id, _NodeView()).acked[type_url] = dict(versions)
            self._changed.notify_all()

    async def on_nack(
        self, group: str, node: base_pb2.Node, type_url: str, versions: Mapping[str, str], message: str
    ) -> None:
        async with self._changed:
            rejected = self._nodes.setdefault(node.id, _NodeView()).rejected.setdefault(type_url, {})
            rejected.update({name: (version, message) for name, version in versions.items()})
            self._changed.notify_all()


def _versions(snapshot: Mapping[str, Mapping[str, VersionedResource]]) -> Wanted:
    return {type_url: {name: r.version for name, r in resources.items()} for type_url, resources in snapshot.items()}
