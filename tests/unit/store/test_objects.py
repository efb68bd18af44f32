"""Object writes and reads: what each call stores, and what it refuses."""

import asyncio
from datetime import UTC, datetime

import pytest

from meshplane.store import AlreadyExists, Conflict, NotFound, Store
from meshplane.store.records import Delivery


async def test_create_then_get_returns_what_was_stored(store: Store) -> None:
    created = await store.create(
        "Api", "shop", "orders", spec={"port": 80}, labels={"team": "a"}, annotations={"note": "x"}, origin="git"
    )

    assert created.revision == 1
    assert created.generation == 1
    assert created.spec == {"port": 80}
    assert created.labels == {"team": "a"}
    assert created.annotations == {"note": "x"}
    assert created.origin == "git"
    assert created.status == {}
    assert not created.deleted
    assert created.created_at.tzinfo is not None
    assert created.created_at.utcoffset() == UTC.utcoffset(None)
    assert await store.get("Api", "shop", "orders") == created


async def test_cluster_scoped_objects_use_the_empty_project(store: Store) -> None:
    created = await store.create("Cluster", "", "east", spec={})
    assert await store.get("Cluster", "", "east") == created


async def test_create_twice_is_already_exists(store: Store) -> None:
    await store.create("Api", "shop", "orders", spec={})
    with pytest.raises(AlreadyExists, match="Api shop/orders"):
        await store.create("Api", "shop", "orders", spec={})
    assert await store.current_revision() == 1


async def test_get_of_a_missing_object_names_it(store: Store) -> None:
    with pytest.raises(NotFound, match="Api shop/orders not found"):
        await store.get("Api", "shop", "orders")


async def test_put_creates_then_replaces(store: Store) -> None:
    created, was_created = await store.put("Api", "shop", "orders", spec={"port": 80}, labels={"a": "1"})
    replaced, replaced_created = await store.put("Api", "shop", "orders", spec={"port": 81})

    assert (was_created, replaced_created) == (True, False)
    assert replaced.uid == created.uid
    assert replaced.revision == created.revision + 1
    assert replaced.labels == {}
    assert replaced.created_at == created.created_at
    assert replaced.updated_at >= created.updated_at
    assert await store.get("Api", "shop", "orders") == replaced
    assert [e.op for e in (await store.changes_since(0))[0]] == ["create", "update"]


async def test_put_with_unchanged_content_is_a_no_op(store: Store) -> None:
    first, _ = await store.put("Api", "shop", "orders", spec={"a": [1, 2]}, labels={"x": "y"}, origin="git")

    again, created = await store.put("Api", "shop", "orders", spec={"a": [1, 2]}, labels={"x": "y"}, origin="git")

    assert not created
    assert again == first
    assert await store.current_revision() == first.revision
    assert len((await store.changes_since(0))[0]) == 1


async def test_generation_counts_spec_changes_only(store: Store) -> None:
    await store.put("Api", "shop", "orders", spec={"v": 1})
    relabeled, _ = await store.put("Api", "shop", "orders", spec={"v": 1}, labels={"new": "label"})
    respecced, _ = await store.put("Api", "shop", "orders", spec={"v": 2}, labels={"new": "label"})
    statused = await store.set_status("Api", "shop", "orders", {"ready": True})

    assert (relabeled.generation, respecced.generation, statused.generation) == (1, 2, 2)
    assert (relabeled.revision, respecced.revision, statused.revision) == (2, 3, 4)


async def test_stale_expected_revision_is_a_conflict_and_changes_nothing(store: Store) -> None:
    first, _ = await store.put("Api", "shop", "orders", spec={"v": 1})
    second, _ = await store.put("Api", "shop", "orders", spec={"v": 2}, expected_revision=first.revision)

    with pytest.raises(Conflict, match=f"revision {second.revision}, not {first.revision}"):
        await store.put("Api", "shop", "orders", spec={"v": 3}, expected_revision=first.revision)
    with pytest.raises(Conflict):
        await store.delete("Api", "shop", "orders", expected_revision=first.revision)

    assert await store.get("Api", "shop", "orders") == second
    assert await store.current_revision() == second.revision
    assert len((await store.changes_since(0))[0]) == 2


async def test_a_revision_read_before_a_status_write_still_names_the_content_it_saw(store: Store) -> None:
    first, _ = await store.put("Api", "shop", "orders", spec={"v": 1})
    await store.set_status("Api", "shop", "orders", {"clusters": [{"cluster": "a", "state": "Applied"}]})

    second, _ = await store.put("Api", "shop", "orders", spec={"v": 2}, expected_revision=first.revision)
    statused = await store.set_status("Api", "shop", "orders", {"clusters": [{"cluster": "a", "state": "Pending"}]})

    with pytest.raises(Conflict, match=f"revision {statused.revision}, not {first.revision}"):
        await store.put("Api", "shop", "orders", spec={"v": 3}, expected_revision=first.revision)
    deleted = await store.delete("Api", "shop", "orders", expected_revision=second.revision)
    assert deleted.deleted


async def test_put_expecting_a_revision_of_a_missing_object_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound):
        await store.put("Api", "shop", "orders", spec={}, expected_revision=1)
    assert await store.current_revision() == 0


async def test_delete_tombstones_and_hides_the_object(store: Store) -> None:
    created = await store.create("Api", "shop", "orders", spec={})

    deleted = await store.delete("Api", "shop", "orders", expected_revision=created.revision)

    assert deleted.deleted
    assert deleted.revision == created.revision + 1
    with pytest.raises(NotFound):
        await store.get("Api", "shop", "orders")
    with pytest.raises(NotFound):
        await store.delete("Api", "shop", "orders")
    with pytest.raises(NotFound):
        await store.set_status("Api", "shop", "orders", {})
    assert [e.op for e in (await store.changes_since(0))[0]] == ["create", "delete"]


async def test_recreating_a_deleted_object_makes_a_new_one(store: Store) -> None:
    old, _ = await store.put("Api", "shop", "orders", spec={"v": 1})
    await store.put("Api", "shop", "orders", spec={"v": 2})
    await store.set_status("Api", "shop", "orders", {"ready": True})
    await store.delete("Api", "shop", "orders")

    new = await store.create("Api", "shop", "orders", spec={"v": 3})
    await store.delete("Api", "shop", "orders")
    newer, created = await store.put("Api", "shop", "orders", spec={"v": 4})

    assert new.uid != old.uid
    assert (new.generation, new.status) == (1, {})
    assert created
    assert newer.uid not in {old.uid, new.uid}


async def test_set_status_replaces_status_under_its_own_op(store: Store) -> None:
    created = await store.create("Api", "shop", "orders", spec={"v": 1})

    first = await store.set_status("Api", "shop", "orders", {"ready": False, "reason": "pending"})
    second = await store.set_status("Api", "shop", "orders", {"ready": True})
    unchanged = await store.set_status("Api", "shop", "orders", {"ready": True})

    assert second.status == {"ready": True}
    assert second.spec == created.spec
    assert unchanged == second
    assert (first.revision, second.revision) == (2, 3)
    assert [e.op for e in (await store.changes_since(0))[0]] == ["create", "status", "status"]


async def test_stored_values_are_copies(store: Store) -> None:
    spec = {"routes": [{"path": "/"}]}
    created = await store.create("Api", "shop", "orders", spec=spec)
    spec["routes"].append({"path": "/admin"})

    assert created.spec == {"routes": [{"path": "/"}]}
    assert (await store.get("Api", "shop", "orders")).spec == {"routes": [{"path": "/"}]}


async def test_a_retried_delivery_report_is_applied_once(store: Store) -> None:
    now = datetime.now(UTC)
    first = Delivery("edge-1", "API", "shop", "orders", "v1", "Applied", "", now)
    assert await store.record_deliveries([first], idempotency_key="edge-1/1") is True
    later = Delivery("edge-1", "API", "shop", "orders", "v2", "Failed", "rejected", now)
    assert await store.record_deliveries([later], idempotency_key="edge-1/1") is False
    assert await store.deliveries_of([("API", "shop", "orders")]) == [first]
    assert await store.record_deliveries([later], idempotency_key="edge-1/2") is True
    [kept] = await store.deliveries_of([("API", "shop", "orders")])
    assert (kept.version, kept.state, kept.message) == ("v2", "Failed", "rejected")
    assert [d.name for d in await store.deliveries_changed()] == ["orders"]


async def test_concurrent_status_merges_of_different_fields_keep_every_field(store: Store) -> None:
    await store.create("Cluster", "", "edge-1", spec={})
    fields = [{f"field{i}": i} for i in range(12)]
    await asyncio.gather(*(store.merge_status("Cluster", "", "edge-1", f) for f in fields))
    status = (await store.get("Cluster", "", "edge-1")).status
    assert status == {f"field{i}": i for i in range(12)}


async def test_many_status_merges_in_one_transaction_each_get_a_revision_and_an_event(store: Store) -> None:
    for name in ("edge-1", "edge-2", "edge-3"):
        await store.create("Cluster", "", name, spec={}, labels={"tier": "edge"})
    await store.merge_status("Cluster", "", "edge-2", {"connected": True})
    await store.delete("Cluster", "", "edge-3")
    before = await store.current_revision()

    changed = await store.merge_statuses(
        "Cluster",
        "",
        {
            "edge-1": {"connected": True},
            "edge-2": {"connected": True},  # already so: no change
            "edge-3": {"connected": True},  # deleted: skipped
            "edge-9": {"connected": True},  # never there: skipped
        },
    )

    assert changed == 1
    edge_1 = await store.get("Cluster", "", "edge-1")
    assert (edge_1.status, edge_1.revision, edge_1.labels) == ({"connected": True}, before + 1, {"tier": "edge"})
    events, current = await store.changes_since(before)
    assert [(e.revision, e.op, e.name) for e in events] == [(before + 1, "status", "edge-1")]
    assert current[("Cluster", "", "edge-1")] == edge_1

    assert await store.merge_statuses("Cluster", "", {"edge-1": {"lastSeen": "t1"}, "edge-2": {"lastSeen": "t1"}}) == 2
    assert await store.current_revision() == before + 3
    events, _ = await store.changes_since(before + 1)
    assert [(e.revision, e.name) for e in events] == [(before + 2, "edge-1"), (before + 3, "edge-2")]
    assert (await store.get("Cluster", "", "edge-2")).status == {"connected": True, "lastSeen": "t1"}


async def test_one_report_naming_an_object_twice_keeps_the_last(store: Store) -> None:
    now = datetime.now(UTC)
    first = Delivery("edge-1", "API", "shop", "orders", "v1", "Applied", "", now)
    second = Delivery("edge-1", "API", "shop", "orders", "v2", "Failed", "rejected", now)
    other = Delivery("edge-2", "API", "shop", "orders", "v1", "Applied", "", now)
    assert await store.record_deliveries([first, other, second]) is True
    kept = {d.cluster: (d.version, d.state) for d in await store.deliveries_of([("API", "shop", "orders")])}
    assert kept == {"edge-1": ("v2", "Failed"), "edge-2": ("v1", "Applied")}


async def test_concurrent_reports_are_written_together_each_key_once(store: Store) -> None:
    now = datetime.now(UTC)

    def report(cluster: str, version: str) -> list[Delivery]:
        return [Delivery(cluster, "API", "shop", "orders", version, "Applied", "", now)]

    outcomes = await asyncio.gather(
        *(store.record_deliveries(report(f"edge-{i}", "v1"), idempotency_key=f"edge-{i}/1") for i in range(20)),
        store.record_deliveries(report("edge-0", "v9"), idempotency_key="edge-0/1"),  # a retry of edge-0's
        store.record_deliveries(report("edge-0", "v2"), idempotency_key="edge-0/2"),
    )

    assert outcomes == [True] * 20 + [False, True]
    kept = {d.cluster: d.version for d in await store.deliveries_of([("API", "shop", "orders")])}
    assert kept == {"edge-0": "v2", **{f"edge-{i}": "v1" for i in range(1, 20)}}
    assert await store.record_deliveries(report("edge-1", "v3"), idempotency_key="edge-1/1") is False
