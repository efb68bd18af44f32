"""History and audit: each change of content keeps its version and who made it, in the change's transaction."""

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from meshplane.audit import Actor, acting_as
from meshplane.store import Conflict, NotFound, Store, queries
from meshplane.store.errors import OwnedElsewhere

ALICE = Actor("token/alice", address="127.0.0.1", request_id="req-1", trace_id="ab" * 16)


async def test_every_version_is_kept_newest_first_with_who_wrote_it(store: Store) -> None:
    with acting_as(ALICE):
        await store.create("API", "shop", "orders", spec={"v": 1}, labels={"tier": "prod"})
        await store.put("API", "shop", "orders", spec={"v": 2}, labels={"tier": "prod"})
    await store.set_status("API", "shop", "orders", {"ready": True})
    with acting_as(Actor("cluster/edge-1")):
        await store.delete("API", "shop", "orders")

    entries = await store.history("API", "shop", "orders")

    assert [(e.revision, e.op, e.generation, e.who) for e in entries] == [
        (4, "delete", 2, "cluster/edge-1"),
        (2, "update", 2, "token/alice"),
        (1, "create", 1, "token/alice"),
    ]
    assert [e.obj.spec for e in entries] == [{"v": 2}, {"v": 2}, {"v": 1}]
    assert entries[0].obj.deleted and not entries[1].obj.deleted
    assert entries[2].obj.labels == {"tier": "prod"}
    assert [e.revision for e in await store.history("API", "shop", "orders", limit=1)] == [4]


async def test_version_at_is_the_object_as_that_change_wrote_it(store: Store) -> None:
    created = await store.create("API", "shop", "orders", spec={"v": 1}, annotations={"note": "first"})
    await store.put("API", "shop", "orders", spec={"v": 2})

    old = await store.version_at("API", "shop", "orders", created.revision)

    assert old is not None
    assert (old.spec, old.annotations, old.uid, old.revision) == ({"v": 1}, {"note": "first"}, created.uid, 1)
    assert old.created_at == created.created_at
    assert await store.version_at("API", "shop", "orders", 99) is None
    assert await store.version_at("API", "shop", "other", 1) is None


async def test_the_audit_records_who_from_where_and_nothing_of_the_content(store: Store) -> None:
    with acting_as(ALICE):
        await store.create("API", "shop", "orders", spec={"secret": "s3cr3t"})
    await store.create("Cluster", "", "edge-1", spec={})

    newest, oldest = await store.audit(limit=10)

    assert (newest.who, newest.kind, newest.project, newest.address) == ("system", "Cluster", "", None)
    assert (oldest.revision, oldest.who, oldest.address, oldest.request_id, oldest.trace_id) == (
        1,
        "token/alice",
        "127.0.0.1",
        "req-1",
        "ab" * 16,
    )
    assert (oldest.operation, oldest.generation, oldest.name) == ("create", 1, "orders")
    assert "s3cr3t" not in repr(oldest)


async def test_audit_filters_and_pages(store: Store) -> None:
    with acting_as(ALICE):
        for name in ("a", "b", "c"):
            await store.create("API", "shop", name, spec={})
    await store.create("API", "other", "d", spec={})

    assert [e.name for e in await store.audit(project="shop", limit=2)] == ["c", "b"]
    assert [e.name for e in await store.audit(project="shop", limit=2, after=2)] == ["a"]
    assert [e.name for e in await store.audit(who="system", limit=10)] == ["d"]
    assert [e.name for e in await store.audit(kind="Cluster", limit=10)] == []
    assert await store.audit(since=datetime.now(UTC) + timedelta(minutes=1), limit=10) == []


async def test_a_refused_write_leaves_no_history_or_audit(store: Store) -> None:
    await store.put("API", "shop", "orders", spec={"v": 1}, origin="cluster/edge-1")
    with pytest.raises(Conflict):
        await store.put("API", "shop", "orders", spec={"v": 2}, origin="cluster/edge-1", expected_revision=7)
    with pytest.raises(OwnedElsewhere):
        await store.put("API", "shop", "orders", spec={"v": 3})

    assert [e.revision for e in await store.history("API", "shop", "orders")] == [1]
    assert [e.revision for e in await store.audit(limit=10)] == [1]


async def test_writers_in_one_group_commit_each_keep_their_own_actor(store: Store) -> None:
    async def write_as(who: str) -> None:
        with acting_as(Actor(who)):
            await store.create("API", "shop", who.replace("/", "-"), spec={})

    await asyncio.gather(*(write_as(f"token/t{i}") for i in range(20)))

    entries = await store.audit(limit=50)
    assert {(e.name, e.who) for e in entries} == {(f"token-t{i}", f"token/t{i}") for i in range(20)}


async def test_an_unchanged_put_records_nothing(store: Store) -> None:
    await store.put("API", "shop", "orders", spec={"v": 1})
    await store.put("API", "shop", "orders", spec={"v": 1})

    assert len(await store.history("API", "shop", "orders")) == 1


async def test_pruning_keeps_the_newest_versions_of_each_object_and_recent_audit(store: Store) -> None:
    for v in range(5):
        await store.put("API", "shop", "orders", spec={"v": v})
    await store.create("API", "shop", "one", spec={})

    removed = await store.prune_history(2, datetime.now(UTC) - timedelta(days=1))

    assert removed == 3
    assert [e.obj.spec for e in await store.history("API", "shop", "orders")] == [{"v": 4}, {"v": 3}]
    assert len(await store.history("API", "shop", "one")) == 1
    assert len(await store.audit(limit=10)) == 6
    assert await store.prune_history(0, datetime.now(UTC) + timedelta(seconds=1)) == 6
    assert await store.audit(limit=10) == []
    assert len(await store.history("API", "shop", "orders")) == 2


async def test_history_survives_the_compaction_of_a_tombstone(store: Store) -> None:
    await store.create("API", "shop", "orders", spec={"v": 1})
    await store.delete("API", "shop", "orders")
    await store.compact(await store.current_revision())

    assert [e.op for e in await store.history("API", "shop", "orders")] == ["delete", "create"]


async def test_a_write_whose_history_cannot_be_kept_is_not_kept_either(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*_: object) -> None:
        raise RuntimeError("history table unavailable")

    monkeypatch.setattr(queries, "history_and_audit_rows", refuse)
    with pytest.raises(RuntimeError, match="history table unavailable"):
        await store.create("API", "shop", "orders", spec={})

    with pytest.raises(NotFound):
        await store.get("API", "shop", "orders")
    assert await store.current_revision() == 0
