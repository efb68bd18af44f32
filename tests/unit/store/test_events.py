"""The event log: every write in order, snapshots that join it without a gap, compaction, waiting."""

import asyncio
import time
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from meshplane.store import Compacted, Event, Store

WRITTEN = datetime(2026, 1, 1, tzinfo=UTC)
"""Stands in for each event's commit time, which the test cannot know."""


async def _write_a_bit_of_everything(store: Store) -> None:
    await store.create("Api", "shop", "orders", spec={"v": 1}, trace_context={"traceparent": "00-abc-def-01"})
    await store.put("Api", "shop", "orders", spec={"v": 2})
    await store.put("Api", "shop", "orders", spec={"v": 2})  # no-op: no event
    await store.set_status("Api", "shop", "orders", {"ready": True})
    await store.create("Cluster", "", "east", spec={})
    await store.delete("Api", "shop", "orders", trace_context={"traceparent": "00-123-456-01"})


async def test_changes_since_returns_every_write_in_order(store: Store) -> None:
    await _write_a_bit_of_everything(store)

    events = (await store.changes_since(0))[0]

    assert [replace(event, created_at=WRITTEN) for event in events] == [
        Event(1, "create", "Api", "shop", "orders", {"traceparent": "00-abc-def-01"}, WRITTEN),
        Event(2, "update", "Api", "shop", "orders", None, WRITTEN),
        Event(3, "status", "Api", "shop", "orders", None, WRITTEN),
        Event(4, "create", "Cluster", "", "east", None, WRITTEN),
        Event(5, "delete", "Api", "shop", "orders", {"traceparent": "00-123-456-01"}, WRITTEN),
    ]
    written = [event.created_at for event in events]
    assert written == sorted(written) and all(at.tzinfo is not None for at in written)
    assert (await store.changes_since(3))[0] == events[3:]
    assert (await store.changes_since(1, limit=2))[0] == events[1:3]
    assert (await store.changes_since(5))[0] == []


async def test_snapshot_then_changes_since_its_revision_covers_everything(store: Store) -> None:
    await store.create("Api", "shop", "orders", spec={"v": 1})
    await store.create("Api", "shop", "carts", spec={"v": 1})
    await store.create("Gateway", "shop", "gw", spec={})
    await store.create("Cluster", "", "east", spec={})

    revision, objects = await store.snapshot(["Api", "Gateway"])
    await store.delete("Api", "shop", "carts")
    await store.create("Gateway", "shop", "gw2", spec={})

    assert revision == 4
    assert [(obj.kind, obj.name) for obj in objects] == [("Api", "carts"), ("Api", "orders"), ("Gateway", "gw")]
    assert [(e.revision, e.op, e.name) for e in (await store.changes_since(revision))[0]] == [
        (5, "delete", "carts"),
        (6, "create", "gw2"),
    ]


async def test_snapshot_of_no_kinds_is_just_the_revision(store: Store) -> None:
    await store.create("Api", "shop", "orders", spec={})
    assert await store.snapshot([]) == (1, [])


async def test_compact_drops_old_events_and_tombstones(store: Store) -> None:
    await _write_a_bit_of_everything(store)

    removed = await store.compact(keep_after=3)

    assert removed == 3  # events 1..3; the tombstone is at revision 5, so it stays
    with pytest.raises(Compacted) as refused:
        (await store.changes_since(2))[0]
    assert refused.value.floor == 3
    assert [e.revision for e in (await store.changes_since(3))[0]] == [4, 5]

    assert await store.compact(keep_after=5) == 3  # events 4 and 5, and the tombstone
    assert (await store.changes_since(5))[0] == []
    assert await store.create("Api", "shop", "orders", spec={}) is not None


async def test_compact_never_moves_the_floor_back_or_past_the_present(store: Store) -> None:
    await _write_a_bit_of_everything(store)
    await store.compact(keep_after=4)

    assert await store.compact(keep_after=2) == 0
    with pytest.raises(Compacted):
        (await store.changes_since(3))[0]

    await store.compact(keep_after=1000)
    assert (await store.changes_since(5))[0] == []
    with pytest.raises(Compacted) as refused:
        (await store.changes_since(4))[0]
    assert refused.value.floor == 5


async def test_wait_for_revision_wakes_on_a_write(store: Store) -> None:
    await store.create("Api", "shop", "orders", spec={})
    waiter = asyncio.create_task(store.wait_for_revision(1, timeout=10))
    await asyncio.sleep(0.05)
    assert not waiter.done()

    started = time.monotonic()
    await store.put("Api", "shop", "orders", spec={"v": 2})
    assert await waiter == 2
    assert time.monotonic() - started < 0.4  # woken, not polled


async def test_wait_for_revision_returns_at_once_when_already_past(store: Store) -> None:
    await store.create("Api", "shop", "orders", spec={})
    assert await store.wait_for_revision(0, timeout=10) == 1


async def test_wait_for_revision_times_out_with_the_current_revision(store: Store) -> None:
    await store.create("Api", "shop", "orders", spec={})
    started = time.monotonic()
    assert await store.wait_for_revision(1, timeout=0.2) == 1
    assert 0.2 <= time.monotonic() - started < 1


async def test_wait_for_revision_sees_writes_from_another_store(store: Store, store_url: str) -> None:
    other = await Store.open(store_url)
    try:
        waiter = asyncio.create_task(store.wait_for_revision(0, timeout=10))
        await asyncio.sleep(0.05)
        await other.create("Api", "shop", "orders", spec={})
        assert await asyncio.wait_for(waiter, timeout=2) == 1
    finally:
        await other.close()
