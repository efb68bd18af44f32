"""The projection feeder: a server that falls behind the compacted event log resyncs from a snapshot."""

from __future__ import annotations

import asyncio

import pytest

from meshplane.store.errors import Compacted
from meshplane.store.store import Store
from meshplane_testing.eventually import eventually_async

from .feeders import API_TYPE, api_spec, feeder_of, running


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
