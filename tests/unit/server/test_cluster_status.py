"""Cluster status fields are written behind: coalesced per cluster, many clusters in one transaction,
and kept across a failed write."""

from __future__ import annotations

import asyncio
from typing import Any

from meshplane.server.control_plane import ClusterRegistry
from meshplane.store.store import Store


async def test_queued_fields_coalesce_and_land_together(store: Store) -> None:
    for name in ("edge-1", "edge-2"):
        await store.create("Cluster", "", name, spec={})
    registry = ClusterRegistry(store)
    before = await store.current_revision()

    registry.update_status("edge-1", connected=True, lastSeen="t1")
    registry.update_status("edge-2", connected=True, lastSeen="t1")
    registry.update_status("edge-1", connected=False, lastSeen="t2")  # newer: wins over the first
    registry.update_status("edge-404", connected=True)  # no such cluster: dropped, the others still land
    await registry.flush()

    assert (await store.get("Cluster", "", "edge-1")).status == {"connected": False, "lastSeen": "t2"}
    assert (await store.get("Cluster", "", "edge-2")).status == {"connected": True, "lastSeen": "t1"}
    assert await store.current_revision() == before + 2  # one status change per cluster


async def test_a_failed_write_is_retried_and_newer_fields_win(store: Store) -> None:
    await store.create("Cluster", "", "edge-1", spec={})
    registry = ClusterRegistry(store, retry_delay=0.01)
    real = store.merge_statuses
    attempts: list[dict[str, Any]] = []
    queued_during_failure = asyncio.Event()

    async def failing_once(kind: str, project: str, changes: dict[str, Any]) -> int:
        attempts.append({name: dict(fields) for name, fields in changes.items()})
        if len(attempts) == 1:
            registry.update_status("edge-1", lastSeen="t2")  # arrives while the first write fails
            queued_during_failure.set()
            raise ConnectionError("database unreachable")
        return await real(kind, project, changes)

    store.merge_statuses = failing_once  # type: ignore[method-assign]
    registry.update_status("edge-1", connected=True, lastSeen="t1")
    await registry.flush()

    assert queued_during_failure.is_set()
    assert attempts[-1] == {"edge-1": {"connected": True, "lastSeen": "t2"}}
    assert (await store.get("Cluster", "", "edge-1")).status == {"connected": True, "lastSeen": "t2"}


async def test_reports_refresh_last_seen_at_most_once_per_interval(store: Store) -> None:
    await store.create("Cluster", "", "edge-1", spec={})
    registry = ClusterRegistry(store, last_seen_every=3600)
    registry.seen("edge-1")
    await registry.flush()
    first = await store.get("Cluster", "", "edge-1")
    assert "lastSeen" in first.status

    for _ in range(5):
        registry.seen("edge-1")
    await registry.flush()
    assert (await store.get("Cluster", "", "edge-1")).revision == first.revision

    eager = ClusterRegistry(store, last_seen_every=0)
    eager.seen("edge-1")
    await eager.flush()
    assert (await store.get("Cluster", "", "edge-1")).revision > first.revision
