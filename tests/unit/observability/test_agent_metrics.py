"""The agent's metrics: how its gateways took each publish, and a /metrics with the process's own."""

from __future__ import annotations

from typing import Any

import httpx
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3.base_pb2 import Node

from meshplane.agent.admin import admin_app
from meshplane.agent.gateway import CLUSTER, GATEWAYS, LISTENER, GatewayPublisher
from meshplane.agent.translate import EnvoyConfig
from meshplane.xds.cache import ResourceCache
from meshplane.xds.resource import pack

from .support import sample

GATEWAY = Node(id="envoy-1")


def publishes(state: str) -> float:
    return sample("meshplane_agent_gateway_publishes_total", state=state)


def config(*clusters: str) -> EnvoyConfig:
    return EnvoyConfig(
        listeners=[], routes=[], clusters=[cluster_pb2.Cluster(name=name) for name in clusters], endpoints=[]
    )


async def test_each_publish_is_counted_by_how_the_gateways_took_it() -> None:
    publisher = GatewayPublisher(ResourceCache(), ack_timeout=0.1)
    before = {state: publishes(state) for state in ("applied", "pending", "failed")}

    await publisher.publish(config("a"))  # no gateway connected: nothing to wait for

    await publisher.on_stream_open(GATEWAY, GATEWAYS, True)
    await publisher.on_ack(GATEWAYS, GATEWAY, LISTENER, {publisher.listener_name: "v1"})
    await publisher.publish(config("a", "b"))  # a serving gateway that never acknowledges

    rejected = pack("c", cluster_pb2.Cluster(name="c"))
    await publisher.on_nack(GATEWAYS, GATEWAY, CLUSTER, {"c": rejected.version}, "bad cluster")
    outcome = await publisher.publish(config("c"))

    assert outcome.message == "bad cluster"
    assert {state: publishes(state) - count for state, count in before.items()} == {
        "applied": 1,
        "pending": 1,
        "failed": 1,
    }


async def test_the_admin_metrics_carry_the_process_metrics_and_the_build() -> None:
    nothing_held: Any = None  # /metrics reads the registry only
    transport = httpx.ASGITransport(admin_app(nothing_held, ResourceCache()))
    async with httpx.AsyncClient(transport=transport, base_url="http://agent") as client:
        response = await client.get("/metrics")

    assert response.status_code == 200
    for family in ("process_cpu_seconds_total", "process_resident_memory_bytes", "meshplane_build_info"):
        assert f"\n{family}" in response.text, family
