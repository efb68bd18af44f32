"""A cluster's summary follows its failures: an object already behind that then fails shows up as the
cluster's last error, and the error goes once the object is applied."""

from __future__ import annotations

from datetime import UTC, datetime

from meshplane.model.status import DeliveryState
from meshplane.server.control_plane import ClusterRegistry
from meshplane.server.feeder import ProjectionFeeder
from meshplane.server.leader import Leadership
from meshplane.server.manifests import ManifestProjection
from meshplane.server.projection import FleetProjection
from meshplane.server.status import StatusRollup
from meshplane.store.records import Delivery
from meshplane.store.store import Store
from meshplane.xds.cache import ResourceCache
from tests.unit.server.feeders import running

BACKEND = {"host": "127.0.0.1", "port": 9001}


async def test_an_object_that_fails_after_it_was_pending_becomes_the_clusters_last_error(store: Store) -> None:
    await store.create("Cluster", "", "edge", spec={})
    await store.create("API", "shop", "orders", spec={"basePath": "/orders", "backends": [BACKEND]})
    cache = ResourceCache()
    projection = FleetProjection(cache)
    await ProjectionFeeder(store, projection, ManifestProjection(cache))._load()
    rollup = StatusRollup(store, projection, ClusterRegistry(store), Leadership(store))
    version = projection.objects[("API", "shop", "orders")].resource.version

    async def summary_after(state: str, message: str = "") -> dict:
        delivery = Delivery("edge", "API", "shop", "orders", version, state, message, datetime.now(UTC))
        await store.record_deliveries([delivery])
        await rollup.pass_once()
        return (await store.get("Cluster", "", "edge")).status

    await rollup.pass_once()
    pending = (await store.get("Cluster", "", "edge")).status
    failed = await summary_after(DeliveryState.FAILED.value, "rejected by Envoy")
    applied = await summary_after(DeliveryState.APPLIED.value)

    assert (pending["outOfDate"], pending.get("lastError")) == (1, None)
    assert (failed["outOfDate"], failed["lastError"]) == (1, "API shop/orders: rejected by Envoy")
    assert failed["byProject"] == {
        "shop": {
            "outOfDate": 1,
            "behindSince": failed["behindSince"],
            "lastError": "API shop/orders: rejected by Envoy",
        }
    }
    assert (applied["outOfDate"], applied.get("lastError")) == (0, None)
    assert applied["byProject"] == {}


async def test_a_cluster_stops_counting_an_object_moved_off_it_or_deleted(store: Store) -> None:
    """Pending on both clusters, then placed on one only, then deleted: each cluster's count follows."""
    for name in ("east", "west"):
        await store.create("Cluster", "", name, spec={}, labels={"zone": name})
    placed = {"basePath": "/orders", "backends": [BACKEND], "placement": {"clusters": ["east", "west"]}}
    await store.create("API", "shop", "orders", spec=placed)
    cache = ResourceCache()
    projection = FleetProjection(cache)
    feeder = ProjectionFeeder(store, projection, ManifestProjection(cache))
    await feeder._load()
    rollup = StatusRollup(store, projection, ClusterRegistry(store), Leadership(store))

    async def counts() -> dict[str, int]:
        await feeder.reached(await store.current_revision())
        await rollup.pass_once()
        return {name: (await store.get("Cluster", "", name)).status["outOfDate"] for name in ("east", "west")}

    async with running(feeder):
        assert await counts() == {"east": 1, "west": 1}
        await store.put("API", "shop", "orders", spec={**placed, "placement": {"clusters": ["east"]}})
        assert await counts() == {"east": 1, "west": 0}
        await store.delete("API", "shop", "orders")
        assert await counts() == {"east": 0, "west": 0}
