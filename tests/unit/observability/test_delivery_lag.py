"""Each cluster's delivery lag: revisions and seconds since the oldest change it has not applied."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from meshplane.model.registry import REGISTRY
from meshplane.model.status import DeliveryState
from meshplane.model.stored import StoredObject
from meshplane.server.control_plane import ClusterRegistry
from meshplane.server.feeder import ProjectionFeeder
from meshplane.server.leader import Leadership
from meshplane.server.manifests import ManifestProjection
from meshplane.server.projection import DeliveredObject, FleetProjection, deliver
from meshplane.server.status import StatusRollup, delivery_lag
from meshplane.store.records import Delivery
from meshplane.store.store import Store
from meshplane.xds.cache import ResourceCache
from meshplane_testing.eventually import eventually_async

from .support import present, sample

NOW = datetime(2026, 1, 2, tzinfo=UTC)
API = REGISTRY.get("API")
BACKEND = {"host": "127.0.0.1", "port": 9001}


def delivered(name: str, revision: int, age: float) -> DeliveredObject:
    at = NOW - timedelta(seconds=age)
    spec = {"basePath": f"/{name}", "backends": [BACKEND]}
    stored = StoredObject(
        kind="API",
        project="shop",
        name=name,
        uid=name,
        revision=revision,
        generation=1,
        origin=None,
        labels={},
        annotations={},
        spec=spec,
        status={},
        created_at=at,
        updated_at=at,
        deleted=False,
    )
    return deliver(API, stored)


def test_a_cluster_holding_everything_has_no_lag() -> None:
    objects = {("API", "shop", "a"): delivered("a", 3, 10.0)}

    assert delivery_lag([], objects, 9, NOW) == (0, 0.0)


def test_lag_counts_from_the_oldest_unapplied_change() -> None:
    objects = {
        ("API", "shop", "a"): delivered("a", 5, 2.0),
        ("API", "shop", "b"): delivered("b", 7, 30.0),  # the newer revision, yet the older write (a restart read it)
        ("API", "shop", "c"): delivered("c", 2, 60.0),  # applied: not counted
    }
    unapplied = [("API", "shop", "a"), ("API", "shop", "b"), ("API", "shop", "gone")]

    assert delivery_lag(unapplied, objects, 9, NOW) == (5, 30.0)


def test_a_clock_behind_the_store_never_makes_the_lag_negative() -> None:
    future = replace(delivered("a", 9, 0.0), changed_at=NOW + timedelta(seconds=5))

    assert delivery_lag([("API", "shop", "a")], {("API", "shop", "a"): future}, 9, NOW) == (1, 0.0)


def lag(cluster: str) -> tuple[float, float]:
    return (
        sample("meshplane_cluster_delivery_lag_revisions", cluster=cluster),
        sample("meshplane_cluster_delivery_lag_seconds", cluster=cluster),
    )


async def test_the_roll_up_publishes_each_clusters_lag_until_it_applies_and_forgets_it_off_lead(
    store: Store,
) -> None:
    await store.create("Cluster", "", "lag-east", spec={})
    await store.create("Cluster", "", "lag-west", spec={})
    written = await store.create("API", "shop", "orders", spec={"basePath": "/orders", "backends": [BACKEND]})
    await store.create("Project", "", "other", spec={})  # a later revision that is not the cluster's business
    cache = ResourceCache()
    projection = FleetProjection(cache)
    await ProjectionFeeder(store, projection, ManifestProjection(cache))._load()
    leadership = Leadership(store)
    rollup = StatusRollup(store, projection, ClusterRegistry(store), leadership)

    await rollup.pass_once()

    revisions, seconds = lag("lag-east")
    assert revisions == await store.current_revision() - written.revision + 1
    assert 0 <= seconds < 60
    assert lag("lag-west")[0] == revisions

    version = projection.objects[("API", "shop", "orders")].resource.version
    applied = Delivery("lag-east", "API", "shop", "orders", version, DeliveryState.APPLIED.value, "", datetime.now(UTC))
    await store.record_deliveries([applied])
    await rollup.pass_once()

    assert lag("lag-east") == (0, 0)
    assert lag("lag-west")[0] > 0

    leadership.is_leader = False
    running = asyncio.create_task(rollup.run())
    try:
        await eventually_async(
            lambda: not present("meshplane_cluster_delivery_lag_revisions", cluster="lag-west"), timeout=2.0
        )
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
    assert not present("meshplane_cluster_delivery_lag_seconds", cluster="lag-east")
