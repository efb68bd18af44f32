"""The projection learns from the event log which write made each object what it is, so pushes join that
write's trace: from events as they come, and from the log again when a server (re)loads a snapshot."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from meshplane.model.registry import REGISTRY
from meshplane.server.manifests import ManifestProjection
from meshplane.server.projection import FleetProjection
from meshplane.server.sync import ProjectionFeeder
from meshplane.store.store import Store
from meshplane.xds.cache import ResourceCache

API_TYPE = REGISTRY.get("API").type_url


def trace(n: int) -> dict[str, str]:
    return {"traceparent": f"00-{n:032x}-{n:016x}-01"}


def spec(port: int) -> dict:
    return {"basePath": "/orders", "backends": [{"host": "127.0.0.1", "port": port}]}


async def test_a_loaded_snapshot_and_later_events_carry_their_writes_trace_context(tmp_path: Path) -> None:
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}")
    try:
        await store.create("Cluster", "", "edge-1", spec={})
        await store.create("API", "shop", "orders", spec=spec(9001), trace_context=trace(1))
        await store.set_status("API", "shop", "orders", {"observed": True})  # a status write is not the change
        await store.create("API", "shop", "billing", spec=spec(9002), trace_context=trace(2))
        await store.put("API", "shop", "billing", spec=spec(9003))  # its latest change was not traced
        cache = ResourceCache()
        feeder = ProjectionFeeder(store, FleetProjection(cache), ManifestProjection(cache), poll_interval=0.05)

        await feeder._load()
        held = cache.resources("edge-1", API_TYPE)
        assert held["shop/orders"].trace == trace(1)
        assert held["shop/billing"].trace is None

        task = asyncio.create_task(feeder.run())
        try:
            generation = cache.generation("edge-1")
            await store.put("API", "shop", "billing", spec=spec(9004), trace_context=trace(3))
            async with asyncio.timeout(5):
                await cache.wait_for_change("edge-1", generation)
            assert cache.resources("edge-1", API_TYPE)["shop/billing"].trace == trace(3)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    finally:
        await store.close()
