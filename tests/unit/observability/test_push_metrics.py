"""Pushes are counted per type and timed from the commit of the oldest change they carry."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from pathlib import Path

from envoy.config.core.v3.base_pb2 import Node
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2

from meshplane.model.registry import REGISTRY
from meshplane.server.feeder import ProjectionFeeder
from meshplane.server.manifests import ManifestProjection
from meshplane.server.projection import FleetProjection
from meshplane.store.store import Store
from meshplane.xds.cache import ResourceCache
from meshplane.xds.server import XdsServer
from meshplane_testing.xds_doubles import STRING, Agent, RawStream, by_cluster, serve_xds, text

from .support import sample

KIND = "StringValue"
API_TYPE = REGISTRY.get("API").type_url
BACKEND = {"host": "127.0.0.1", "port": 9001}


def server_name() -> str:
    """A server label of this test's own: the registry is shared by every test in the process."""
    return f"test-{uuid.uuid4().hex[:8]}"


def pushes(server: str) -> float:
    return sample("meshplane_xds_pushes_total", server=server, type=KIND)


def pushed_bytes(server: str) -> float:
    return sample("meshplane_xds_pushed_bytes_total", server=server, type=KIND)


def timed(server: str) -> tuple[float, float]:
    """(count, sum) of the push-latency histogram."""
    labels = {"server": server, "type": KIND}
    return (
        sample("meshplane_xds_push_latency_seconds_count", **labels),
        sample("meshplane_xds_push_latency_seconds_sum", **labels),
    )


def test_a_type_remembers_when_its_oldest_change_after_a_generation_was_made() -> None:
    cache = ResourceCache()
    cache.set_type("g", STRING, {"a": text("a")})
    seen = cache.generation("g")
    with cache.stamped(100.0):
        cache.update("g", STRING, upserts=[text("b")])
    with cache.stamped(90.0):  # committed earlier, applied later: the oldest still counts
        cache.update("g", STRING, upserts=[text("c")])
    with cache.stamped(120.0):
        cache.update("g", STRING, upserts=[text("b", "v2")])

    assert cache.changed_at("g", STRING, seen) == 90.0
    assert cache.changed_at("g", STRING, cache.generation("g") - 1) == 120.0
    assert cache.changed_at("g", STRING, cache.generation("g")) is None


def test_unstamped_and_unchanging_writes_leave_no_time() -> None:
    cache = ResourceCache()
    cache.set_type("g", STRING, {"a": text("a")})
    seen = cache.generation("g")
    cache.update("g", STRING, upserts=[text("b")])
    with cache.stamped(100.0):
        cache.update("g", STRING, upserts=[text("b")])  # the same content: no change

    assert cache.changed_at("g", STRING, seen) is None
    assert cache.changed_at("g", "type.googleapis.com/unknown", seen) is None


async def test_a_delta_push_is_counted_and_timed_from_its_change_but_the_first_sync_is_not_timed() -> None:
    name = server_name()
    cache = ResourceCache()
    cache.set_type("edge", STRING, {"a": text("a")})

    async with serve_xds(XdsServer(cache, node_group=by_cluster, name=name)) as served:
        agent = Agent(served, "edge")
        async with agent.running():
            await agent.until(lambda: "a" in agent.held[STRING])
            assert (pushes(name), timed(name)) == (1.0, (0.0, 0.0))

            with cache.stamped(time.time() - 2.0):
                cache.update("edge", STRING, upserts=[text("b")])
            await agent.until(lambda: "b" in agent.held[STRING])

    count, total = timed(name)
    assert pushes(name) == 2.0
    assert count == 1.0
    assert 2.0 <= total < 10.0


async def test_a_delta_push_counts_the_bytes_of_what_it_sends_not_of_what_the_client_holds() -> None:
    name = server_name()
    cache = ResourceCache()
    cache.set_type("edge", STRING, {"a": text("a", "x" * 5000)})

    async with serve_xds(XdsServer(cache, node_group=by_cluster, name=name)) as served:
        agent = Agent(served, "edge")
        async with agent.running():
            await agent.until(lambda: "a" in agent.held[STRING])
            first = pushed_bytes(name)
            cache.update("edge", STRING, upserts=[text("b")])
            await agent.until(lambda: "b" in agent.held[STRING])
            second = pushed_bytes(name) - first

    assert first > 5000
    assert 0 < second < 200


async def test_a_sotw_push_is_timed_from_its_change() -> None:
    name = server_name()
    cache = ResourceCache()
    cache.set_type("edge", STRING, {"a": text("a")})
    xds = XdsServer(cache, node_group=by_cluster, name=name)

    async with serve_xds(xds) as served, served.channel() as channel:
        stream = RawStream(ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).StreamAggregatedResources())
        try:
            await stream.send(discovery_pb2.DiscoveryRequest(node=Node(id="gw", cluster="edge"), type_url=STRING))
            first = await stream.recv()
            await stream.send(
                discovery_pb2.DiscoveryRequest(
                    type_url=STRING, version_info=first.version_info, response_nonce=first.nonce
                )
            )
            with cache.stamped(time.time() - 1.0):
                cache.update("edge", STRING, upserts=[text("b")])
            second = await stream.recv()
        finally:
            await stream.close()

    count, total = timed(name)
    assert len(second.resources) == 2
    assert (pushes(name), count) == (2.0, 1.0)
    assert pushed_bytes(name) > second.ByteSize()
    assert 1.0 <= total < 10.0


async def test_the_feeder_stamps_what_it_projects_with_the_commit_time_of_the_change(tmp_path: Path) -> None:
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}")
    tail: asyncio.Task[None] | None = None
    try:
        await store.create("Cluster", "", "edge-1", spec={})
        cache = ResourceCache()
        feeder = ProjectionFeeder(store, FleetProjection(cache), ManifestProjection(cache), poll_interval=0.05)
        await feeder._load()
        seen, loaded = cache.generation("edge-1"), feeder.revision
        tail = asyncio.create_task(feeder._tail())

        await store.create("API", "shop", "orders", spec={"basePath": "/orders", "backends": [BACKEND]})
        await asyncio.wait_for(cache.wait_for_change("edge-1", seen), 5)

        [event] = (await store.changes_since(loaded))[0]
        assert set(cache.resources("edge-1", API_TYPE)) == {"shop/orders"}
        assert cache.changed_at("edge-1", API_TYPE, seen) == event.created_at.timestamp()
    finally:
        if tail is not None:
            tail.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await tail
        await store.close()
