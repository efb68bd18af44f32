"""The projection feeder: a server that falls behind the compacted event log resyncs from a snapshot."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from meshplane.model.registry import REGISTRY
from meshplane.server.manifests import ManifestProjection
from meshplane.server.projection import FleetProjection
from meshplane.server.sync import ProjectionFeeder
from meshplane.store.errors import Compacted
from meshplane.store.store import Store
from meshplane.xds.cache import ResourceCache
from meshplane_testing.eventually import eventually_async

API_TYPE = REGISTRY.get("API").type_url


def api_spec(port: int) -> dict:
    return {"basePath": "/orders", "backends": [{"host": "127.0.0.1", "port": port}]}


def feeder_of(store: Store) -> tuple[ResourceCache, ProjectionFeeder]:
    """A feeder of `store` that polls fast, and the cache it fills."""
    cache = ResourceCache()
    return cache, ProjectionFeeder(store, FleetProjection(cache), ManifestProjection(cache), poll_interval=0.05)


@contextlib.asynccontextmanager
async def running(feeder: ProjectionFeeder) -> AsyncIterator[None]:
    """The feeder's loop, for as long as the block lasts."""
    task = asyncio.create_task(feeder.run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_feeder_behind_the_compaction_floor_resyncs_and_misses_nothing(store: Store) -> None:
    await store.create("Cluster", "", "edge-1", spec={})
    await store.create("API", "shop", "orders", spec=api_spec(9001))
    cache, feeder = feeder_of(store)
    await feeder._load()

    # While this server was not tailing: changes, then compaction past where it stopped.
    await store.put("API", "shop", "orders", spec=api_spec(9002))
    await store.create("API", "shop", "billing", spec={**api_spec(9003), "basePath": "/billing"})
    await store.delete("API", "shop", "orders")
    await store.compact(await store.current_revision())

    with pytest.raises(Compacted):
        async with asyncio.timeout(5):
            await feeder._tail()

    async with running(feeder):
        await eventually_async(lambda: set(cache.resources("edge-1", API_TYPE)) == {"shop/billing"}, timeout=5.0)
