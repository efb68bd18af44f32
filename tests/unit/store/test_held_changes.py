"""A store hands back the changes it committed itself as `changes_since` would read them for a reader of
content (status aside), without reading; where another writer took a revision in between, it stops there
and the reader reads the store. What it holds is bounded, lets go of what the reader has taken, and keeps
no status, which can list a whole fleet."""

from __future__ import annotations

import pytest

from meshplane.model.stored import StoredObject
from meshplane.store import Store
from meshplane.store.records import Event


async def written_by_one_store(store: Store) -> int:
    """Creates, an update, a status write and a delete, in several transactions; the revision before them."""
    before = await store.current_revision()
    await store.create("API", "shop", "orders", spec={"basePath": "/orders"}, trace_context={"traceparent": "t1"})
    await store.create("API", "shop", "billing", spec={"basePath": "/billing"})
    await store.put("API", "shop", "orders", spec={"basePath": "/orders/v2"}, labels={"tier": "gold"})
    await store.set_status("API", "shop", "orders", {"clusters": [{"cluster": "c1"}]})
    await store.delete("API", "shop", "billing")
    return before


Read = tuple[list[Event], dict[tuple[str, str, str], StoredObject]]


def content(read: Read | None) -> tuple[list[Event], dict[tuple[str, str, str], tuple]] | None:
    """What a reader of content takes from the changes: the events, and each object but for its status (and
    the revision and time of a status write after its content's)."""
    if read is None:
        return None
    events, objects = read
    kept = {key: (o.uid, o.generation, o.origin, o.labels, o.annotations, o.spec) for key, o in objects.items()}
    return events, kept


async def test_held_changes_are_what_the_store_reads(store: Store) -> None:
    before = await written_by_one_store(store)
    read = await store.changes_since(before, status_changes=False)

    held = store.held_changes(before)
    assert held is not None
    events, objects = held
    assert events == read[0]
    assert [e.revision for e in events] == list(range(before + 1, before + 6))
    assert set(objects) == {("API", "shop", "orders")}  # billing was deleted since
    assert objects["API", "shop", "orders"].status == {}  # not held: never read by who takes them
    assert content(held) == content(read)


async def test_held_changes_let_go_of_what_the_reader_has(store: Store) -> None:
    before = await written_by_one_store(store)

    read = await store.changes_since(before + 3, status_changes=False)
    assert content(store.held_changes(before + 3)) == content(read)
    assert store.held_changes(before + 5) is None  # nothing after the newest
    assert store.held_changes(before) is None  # the reader was past these: they are gone


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
    assert held is not None
    assert content(held) == content(await store.changes_since(before + 2, status_changes=False))
