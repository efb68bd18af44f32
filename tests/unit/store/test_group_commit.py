"""Writes arriving together commit in one transaction, yet each keeps its own outcome and its own revision."""

import asyncio
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncConnection

from meshplane.model.stored import StoredObject
from meshplane.store import AlreadyExists, Conflict, NotFound, Store, queries


def _counting_transactions(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that grows by one for every write transaction the store opens (each reads `meta` under lock)."""
    opened: list[int] = []
    read_meta = queries.read_meta

    async def counted(conn: AsyncConnection, *, lock: bool = False) -> tuple[int, int]:
        if lock:
            opened.append(1)
        return await read_meta(conn, lock=lock)

    monkeypatch.setattr(queries, "read_meta", counted)
    return opened


async def test_concurrent_writes_share_transactions_and_take_consecutive_revisions(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened = _counting_transactions(monkeypatch)

    written = await asyncio.gather(*(store.put("Api", "p", f"api-{i}", spec={"i": i}) for i in range(40)))

    assert len(opened) <= 2, "the first write goes alone, the others wait for it and go together"
    assert sorted(obj.revision for obj, _ in written) == list(range(1, 41))
    assert all(created for _, created in written)
    events = (await store.changes_since(0))[0]
    assert [(e.revision, e.name) for e in events] == sorted((obj.revision, obj.name) for obj, _ in written)
    assert (await store.get("Api", "p", "api-7")).spec == {"i": 7}


async def test_a_refused_write_in_a_group_fails_alone(store: Store) -> None:
    existing = await store.create("Api", "p", "taken", spec={})

    outcomes = await asyncio.gather(
        store.create("Api", "p", "a", spec={}),
        store.create("Api", "p", "taken", spec={"lost": True}),
        store.put("Api", "p", "taken", spec={"stale": True}, expected_revision=existing.revision + 5),
        store.delete("Api", "p", "missing"),
        store.set_status("Api", "p", "b-missing", {"ready": True}),
        store.create("Api", "p", "b", spec={}),
        return_exceptions=True,
    )

    assert [type(o) for o in outcomes] == [StoredObject, AlreadyExists, Conflict, NotFound, NotFound, StoredObject]
    made = [o for o in outcomes if isinstance(o, StoredObject)]
    assert [o.revision for o in made] == [existing.revision + 1, existing.revision + 2]
    assert await store.get("Api", "p", "taken") == existing
    assert [e.name for e in (await store.changes_since(existing.revision))[0]] == ["a", "b"]


async def test_writes_to_one_name_in_a_group_see_each_other_in_arrival_order(store: Store) -> None:
    first, second, third, status = await asyncio.gather(
        store.create("Api", "p", "x", spec={"v": 1}),
        store.put("Api", "p", "x", spec={"v": 2}, expected_revision=1),
        store.create("Api", "p", "x", spec={"v": 3}),
        store.merge_status("Api", "p", "x", {"ready": True}),
        return_exceptions=True,
    )

    assert isinstance(first, StoredObject) and first.revision == 1
    assert isinstance(second, tuple) and second[0].revision == 2 and second[0].generation == 2
    assert second[1] is False, "the put replaced the object the create in its group made"
    assert isinstance(third, AlreadyExists)
    assert isinstance(status, StoredObject) and status.revision == 3
    stored = await store.get("Api", "p", "x")
    assert (stored.spec, stored.status, stored.uid) == ({"v": 2}, {"ready": True}, first.uid)
    assert [e.op for e in (await store.changes_since(0))[0]] == ["create", "update", "status"]


async def test_a_write_the_database_refuses_fails_alone_and_the_rest_commit(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    object_row = queries.object_row

    def refusing(obj: StoredObject) -> dict[str, Any]:
        if obj.name == "poison":
            raise RuntimeError("the database refused the row")
        return object_row(obj)

    monkeypatch.setattr(queries, "object_row", refusing)
    names = ["a", "poison", "b", "c"]

    outcomes: list[Any] = await asyncio.gather(
        *(store.create("Api", "p", name, spec={}) for name in names), return_exceptions=True
    )

    assert isinstance(outcomes[1], RuntimeError)
    assert [o.name for o in outcomes if isinstance(o, StoredObject)] == ["a", "b", "c"]
    events = (await store.changes_since(0))[0]
    assert [e.revision for e in events] == [1, 2, 3]
    assert sorted(e.name for e in events) == ["a", "b", "c"]
    with pytest.raises(NotFound):
        await store.get("Api", "p", "poison")


async def test_a_write_whose_caller_gave_up_still_commits_whole(store: Store) -> None:
    write = asyncio.ensure_future(store.create("Api", "p", "a", spec={}))
    await asyncio.sleep(0)
    write.cancel()
    with pytest.raises(asyncio.CancelledError):
        await write

    assert (await store.wait_for_revision(0, timeout=5)) == 1
    assert (await store.get("Api", "p", "a")).revision == 1


async def test_a_write_within_an_object_that_is_gone_when_it_commits_is_refused(store: Store) -> None:
    await store.create("Project", "", "shop", spec={})
    within = ("Project", "", "shop")

    deleted, refused = await asyncio.gather(
        store.delete("Project", "", "shop"),
        store.put("Api", "shop", "orders", spec={}, within=within),
        return_exceptions=True,
    )

    assert isinstance(deleted, StoredObject) and deleted.deleted
    assert isinstance(refused, NotFound) and (refused.kind, refused.name) == ("Project", "shop")
    with pytest.raises(NotFound):
        await store.get("Api", "shop", "orders")
    with pytest.raises(NotFound, match="Project nowhere"):
        await store.create("Api", "nowhere", "orders", spec={}, within=("Project", "", "nowhere"))
    assert await store.current_revision() == 2
