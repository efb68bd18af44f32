"""A store hands back the changes it committed itself as `changes_since` would read them, without reading;
where another writer took a revision in between, it stops there and the reader reads the store."""

from __future__ import annotations

import pytest

from meshplane.store import Store


async def written_by_one_store(store: Store) -> int:
    """Creates, an update, a status write and a delete, in several transactions; the revision before them."""
    before = await store.current_revision()
    await store.create("API", "shop", "orders", spec={"basePath": "/orders"}, trace_context={"traceparent": "t1"})
    await store.create("API", "shop", "billing", spec={"basePath": "/billing"})
    await store.put("API", "shop", "orders", spec={"basePath": "/orders/v2"}, labels={"tier": "gold"})
    await store.set_status("API", "shop", "orders", {"clusters": []})
    await store.delete("API", "shop", "billing")
    return before


async def test_held_changes_are_what_the_store_reads(store: Store) -> None:
    before = await written_by_one_store(store)

    held = store.held_changes(before)
    assert held is not None
    assert held == await store.changes_since(before)
    events, objects = held
    assert [e.revision for e in events] == list(range(before + 1, before + 6))
    assert set(objects) == {("API", "shop", "orders")}  # billing was deleted since


async def test_held_changes_start_from_any_revision_they_hold(store: Store) -> None:
    before = await written_by_one_store(store)

    held = store.held_changes(before + 3)
    assert held == await store.changes_since(before + 3)
    assert store.held_changes(before + 5) is None  # nothing after the newest


async def test_held_changes_stop_before_a_revision_another_writer_took(store: Store, store_url: str) -> None:
    other = await Store.open(store_url)
    try:
        first = await store.create("API", "shop", "orders", spec={})
        theirs = await other.create("API", "shop", "billing", spec={})
        await store.create("API", "shop", "payments", spec={})

        held = store.held_changes(first.revision - 1)
        assert held is not None
        assert [e.revision for e in held[0]] == [first.revision]
        assert store.held_changes(first.revision) is None  # the next one is theirs: read the store
        events, _ = await store.changes_since(first.revision)
        assert [e.name for e in events] == [theirs.name, "payments"]
    finally:
        await other.close()


async def test_only_the_newest_commits_are_held(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("meshplane.store.store._HELD_CHANGES", 3)
    before = await written_by_one_store(store)

    assert store.held_changes(before) is None  # the oldest were let go
    held = store.held_changes(before + 2)
    assert held == await store.changes_since(before + 2)
