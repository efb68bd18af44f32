"""A roll-up pass writes the statuses it changed in one transaction per kind and project, not one per
object: a cluster that reports thousands of objects at once is rolled up in a few commits."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from meshplane.model.status import DeliveryState
from meshplane.server import status
from meshplane.server.control_plane import ClusterRegistry
from meshplane.server.feeder import ProjectionFeeder
from meshplane.server.leader import Leadership
from meshplane.server.manifests import ManifestProjection
from meshplane.server.projection import FleetProjection
from meshplane.server.status import StatusRollup, _status_writes
from meshplane.store.records import Delivery
from meshplane.store.store import Store
from meshplane.xds.cache import ResourceCache

BACKEND = {"host": "127.0.0.1", "port": 9001}
NAMES = {"shop": [f"api-{index}" for index in range(30)], "books": ["catalog", "loans"]}


async def roll_up_of(store: Store) -> tuple[FleetProjection, StatusRollup]:
    """A projection loaded from `store` and a roll-up over it, as a replica taking the lead builds them."""
    cache = ResourceCache()
    projection = FleetProjection(cache)
    await ProjectionFeeder(store, projection, ManifestProjection(cache))._load()
    return projection, StatusRollup(store, projection, ClusterRegistry(store), Leadership(store))


async def many_batches_of(store: Store, monkeypatch: pytest.MonkeyPatch) -> StatusRollup:
    """Six APIs on each of five clusters, none reported, and a roll-up over them that takes two APIs a batch."""
    for index in range(5):
        await store.create("Cluster", "", f"edge-{index}", spec={})
    for index in range(6):
        await store.create("API", "shop", f"api-{index}", spec={"basePath": f"/a{index}", "backends": [BACKEND]})
    monkeypatch.setattr(status, "_ENTRIES_PER_ROLL", 10)
    return (await roll_up_of(store))[1]


async def applied_everywhere(store: Store, apis: dict[str, list[str]]) -> tuple[FleetProjection, StatusRollup]:
    """One cluster placed with `apis` (project -> names), rolled up once, then reporting all of them applied."""
    await store.create("Cluster", "", "edge", spec={})
    for project, names in apis.items():
        for name in names:
            await store.create("API", project, name, spec={"basePath": f"/{name}", "backends": [BACKEND]})
    projection, rollup = await roll_up_of(store)
    await rollup.pass_once()
    now = datetime.now(UTC)
    await store.record_deliveries(
        Delivery("edge", *key, delivered.resource.version, DeliveryState.APPLIED.value, "", now)
        for key, delivered in projection.objects.items()
        if key[0] == "API"
    )
    return projection, rollup


async def test_a_pass_writes_each_projects_statuses_together(store: Store) -> None:
    _, rollup = await applied_everywhere(store, NAMES)

    writes: list[tuple[str, str, int]] = []
    one_by_one = store.merge_status
    together = store.merge_statuses

    async def merge_status(kind: str, project: str, name: str, fields: dict):  # type: ignore[no-untyped-def]
        writes.append((kind, project, 1))
        return await one_by_one(kind, project, name, fields)

    async def merge_statuses(kind: str, project: str, changes: dict) -> int:
        writes.append((kind, project, len(changes)))
        return await together(kind, project, changes)

    store.merge_status = merge_status  # type: ignore[method-assign]
    store.merge_statuses = merge_statuses  # type: ignore[method-assign]
    await rollup.pass_once()

    api_writes = [write for write in writes if write[0] == "API"]
    assert sorted(api_writes) == [("API", "books", 2), ("API", "shop", 30)]
    for name in NAMES["shop"]:
        [entry] = (await store.get("API", "shop", name)).status["clusters"]
        assert (entry["cluster"], entry["state"]) == ("edge", "Applied")
    for name in NAMES["books"]:
        [entry] = (await store.get("API", "books", name)).status["clusters"]
        assert entry["state"] == "Applied"


async def test_reports_already_rolled_up_are_not_rolled_up_again_by_later_passes(store: Store) -> None:
    projection, rollup = await applied_everywhere(store, {"shop": NAMES["shop"]})
    await rollup.pass_once()

    looked_at: list[int] = []
    deliveries_of = store.deliveries_of

    async def counted(keys):  # type: ignore[no-untyped-def]
        looked_at.append(len(keys))
        return await deliveries_of(keys)

    store.deliveries_of = counted  # type: ignore[method-assign]
    await rollup.pass_once()
    await rollup.pass_once()
    assert looked_at == []

    [key] = [key for key in projection.objects if key[:2] == ("API", "shop")][:1]
    later = Delivery("edge", *key, "other", DeliveryState.FAILED.value, "no", datetime.now(UTC))
    await store.record_deliveries([later])
    await rollup.pass_once()
    assert looked_at == [1]


def test_statuses_listing_a_whole_fleet_are_written_a_few_at_a_time() -> None:
    fleet = [{"cluster": f"edge-{index}", "state": "Pending"} for index in range(900)]
    statuses = [(("API", "shop", f"api-{index}"), fleet) for index in range(5)]
    statuses += [(("API", "books", "catalog"), fleet[:1])]

    writes = [(kind, project, sorted(changes)) for kind, project, changes in _status_writes(statuses)]

    assert writes == [
        ("API", "books", ["catalog"]),
        ("API", "shop", ["api-0", "api-1"]),
        ("API", "shop", ["api-2", "api-3"]),
        ("API", "shop", ["api-4"]),
    ]


async def test_a_pass_over_objects_placed_on_many_clusters_holds_a_bounded_share_of_them_at_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a pass reads and builds for objects on a whole fleet is freed batch by batch: each batch of
    objects is read, rolled up and written before the next is read, and covers a bounded number of
    placements (an object on 10,000 clusters brings 10,000 reports and as many status entries)."""
    rollup = await many_batches_of(store, monkeypatch)

    steps: list[tuple[str, int]] = []
    deliveries_of, merge_statuses = store.deliveries_of, store.merge_statuses

    async def read(keys):  # type: ignore[no-untyped-def]
        keys = list(keys)
        steps.append(("read", len(keys)))
        return await deliveries_of(keys)

    async def write(kind: str, project: str, changes: dict) -> int:
        if kind == "API":
            steps.append(("write", len(changes)))
        return await merge_statuses(kind, project, changes)

    store.deliveries_of = read  # type: ignore[method-assign]
    store.merge_statuses = write  # type: ignore[method-assign]
    await rollup.pass_once()

    assert steps == [("read", 2), ("write", 2)] * 3
    for index in range(6):
        entries = (await store.get("API", "shop", f"api-{index}")).status["clusters"]
        assert [entry["cluster"] for entry in entries] == [f"edge-{index}" for index in range(5)]


async def test_a_replica_taking_the_roll_up_over_reads_each_report_once(store: Store) -> None:
    """Its first pass rolls every object up from the reports about it: reading every report beforehand as
    well, to find what changed, would read a whole fleet's reports twice and hold them all at once. It
    still rolls up the objects that are gone but reported, so their reports are forgotten."""
    await applied_everywhere(store, NAMES)
    gone = ("API", "shop", "retired")
    await store.record_deliveries([Delivery("edge", *gone, "v1", DeliveryState.APPLIED.value, "", datetime.now(UTC))])
    _, rollup = await roll_up_of(store)

    read: list[int] = []
    deliveries_changed, deliveries_of = store.deliveries_changed, store.deliveries_of

    async def changed(since=None):  # type: ignore[no-untyped-def]
        found = await deliveries_changed(since)
        read.append(len(found))
        return found

    async def of(keys):  # type: ignore[no-untyped-def]
        found = await deliveries_of(keys)
        read.append(len(found))
        return found

    store.deliveries_changed = changed  # type: ignore[method-assign]
    store.deliveries_of = of  # type: ignore[method-assign]
    await rollup.pass_once()

    reports = sum(len(names) for names in NAMES.values()) + 1
    assert sum(read) == reports
    assert await deliveries_of([gone]) == []


async def test_a_pass_in_many_batches_recounts_each_cluster_once(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster behind on objects of every batch is counted once, at the end of the pass: recounting it
    after each batch would cost a fleet's recount per batch (a replica taking the roll-up over, with every
    object on every cluster, has a batch per object or two)."""
    rollup = await many_batches_of(store, monkeypatch)
    counted: list[int] = []
    recount = status.behind

    def counting(unapplied, objects):  # type: ignore[no-untyped-def]
        counted.append(len(unapplied))
        return recount(unapplied, objects)

    monkeypatch.setattr(status, "behind", counting)
    await rollup.pass_once()

    assert counted == [6, 6] * 5  # all its objects, then those of its one project
    for index in range(5):
        summary = (await store.get("Cluster", "", f"edge-{index}")).status
        assert summary["outOfDate"] == 6
