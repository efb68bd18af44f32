"""The projection feeder: a server that falls behind the compacted event log resyncs from a snapshot; the
changes it committed itself it takes from the store's memory, reading nothing back."""

from __future__ import annotations

import asyncio
from pathlib import Path

import prometheus_client
import pytest

from meshplane.store.errors import Compacted
from meshplane.store.store import Store
from meshplane_testing.eventually import eventually_async

from .feeders import API_TYPE, api_spec, feeder_of, running


async def test_a_feeder_behind_the_compaction_floor_resyncs_and_misses_nothing(store: Store, tmp_path: Path) -> None:
    await store.create("Cluster", "", "edge-1", spec={})
    await store.create("API", "shop", "orders", spec=api_spec(9001))
    cache, feeder = feeder_of(store)
    await feeder._load()

    # While this server was not tailing: another replica's changes, then compaction past where it stopped.
    other = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'meshplane.db'}")
    try:
        await other.put("API", "shop", "orders", spec=api_spec(9002))
        await other.create("API", "shop", "billing", spec={**api_spec(9003), "basePath": "/billing"})
        await other.delete("API", "shop", "orders")
        await other.compact(await store.current_revision())
    finally:
        await other.close()

    with pytest.raises(Compacted):
        async with asyncio.timeout(5):
            await feeder._tail()

    async with running(feeder):
        await eventually_async(lambda: set(cache.resources("edge-1", API_TYPE)) == {"shop/billing"}, timeout=5.0)


def store_reads() -> float:
    """Store reads of the event log run so far by this process."""
    for metric in prometheus_client.REGISTRY.collect():
        if metric.name == "meshplane_store_transaction_duration_seconds":
            return sum(
                s.value
                for s in metric.samples
                if s.name.endswith("_count") and s.labels["operation"] == "changes_since"
            )
    return 0.0


async def test_a_feeder_takes_this_servers_own_changes_without_reading_them_back(store_url: str) -> None:
    store = await Store.open(store_url)  # on PostgreSQL too: its NOTIFY of a write can come before the commit returns
    try:
        await feeds_own_changes_from_memory(store)
    finally:
        await store.close()


async def feeds_own_changes_from_memory(store: Store) -> None:
    await store.create("Cluster", "", "edge-1", spec={})
    cache, feeder = feeder_of(store)
    async with running(feeder):
        await store.create("API", "shop", "orders", spec=api_spec(9001))
        await eventually_async(lambda: set(cache.resources("edge-1", API_TYPE)) == {"shop/orders"}, timeout=5.0)
        before = store_reads()  # past its first look at the event log, which reads it
        await store.put("API", "shop", "orders", spec=api_spec(9002))
        await store.create("API", "shop", "billing", spec={**api_spec(9003), "basePath": "/billing"})
        await store.delete("API", "shop", "orders")
        await eventually_async(lambda: set(cache.resources("edge-1", API_TYPE)) == {"shop/billing"}, timeout=5.0)
        assert feeder.revision == store.committed
    assert store_reads() == before
