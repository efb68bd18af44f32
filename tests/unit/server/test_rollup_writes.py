"""A roll-up pass writes the statuses it changed in one transaction per kind and project, not one per
object: a cluster that reports thousands of objects at once is rolled up in a few commits."""

from __future__ import annotations

from datetime import UTC, datetime

from meshplane.model.status import DeliveryState
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


async def applied_everywhere(store: Store, apis: dict[str, list[str]]) -> tuple[FleetProjection, StatusRollup]:
    """One cluster placed with `apis` (project -> names), rolled up once, then reporting all of them applied."""
    await store.create("Cluster", "", "edge", spec={})
    for project, names in apis.items():
        for name in names:
            await store.create("API", project, name, spec={"basePath": f"/{name}", "backends": [BACKEND]})
    cache = ResourceCache()
    projection = FleetProjection(cache)
    await ProjectionFeeder(store, projection, ManifestProjection(cache))._load()
    rollup = StatusRollup(store, projection, ClusterRegistry(store), Leadership(store))
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
