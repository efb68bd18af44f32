"""The projection learns from the event log which write made each object what it is, so pushes join that
write's trace: from events as they come, and from the log again when a server (re)loads a snapshot."""

from __future__ import annotations

import asyncio

from meshplane.store.store import Store

from .feeders import API_TYPE, api_spec, feeder_of, running


def trace(n: int) -> dict[str, str]:
    return {"traceparent": f"00-{n:032x}-{n:016x}-01"}


async def test_a_loaded_snapshot_and_later_events_carry_their_writes_trace_context(store: Store) -> None:
    await store.create("Cluster", "", "edge-1", spec={})
    await store.create("API", "shop", "orders", spec=api_spec(9001), trace_context=trace(1))
    await store.set_status("API", "shop", "orders", {"observed": True})  # a status write is not the change
    await store.create("API", "shop", "billing", spec=api_spec(9002), trace_context=trace(2))
    await store.put("API", "shop", "billing", spec=api_spec(9003))  # its latest change was not traced
    cache, feeder = feeder_of(store)

    await feeder._load()
    held = cache.resources("edge-1", API_TYPE)
    assert held["shop/orders"].trace == trace(1)
    assert held["shop/billing"].trace is None

    async with running(feeder):
        generation = cache.generation("edge-1")
        await store.put("API", "shop", "billing", spec=api_spec(9004), trace_context=trace(3))
        async with asyncio.timeout(5):
            await cache.wait_for_change("edge-1", generation)
        assert cache.resources("edge-1", API_TYPE)["shop/billing"].trace == trace(3)
