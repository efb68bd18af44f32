"""The fleet projection: every cluster's set equals what placement selects, after any history."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from meshplane.model.registry import REGISTRY
from meshplane.model.wire import resource_name
from meshplane.server.projection import FleetProjection
from meshplane.store.records import StoredObject
from meshplane.xds.cache import ResourceCache

API_TYPE = REGISTRY.get("API").type_url
NOW = datetime(2026, 1, 1, tzinfo=UTC)
CLUSTERS = ["edge-1", "edge-2", "core-1"]
REGIONS = ["eu", "us"]


def stored(
    kind: str, name: str, *, project: str = "", spec: dict | None = None, labels: dict | None = None
) -> StoredObject:
    return StoredObject(
        kind=kind,
        project=project,
        name=name,
        uid=f"uid-{name}",
        revision=1,
        generation=1,
        origin=None,
        labels=labels or {},
        annotations={},
        spec=spec or {},
        status={},
        created_at=NOW,
        updated_at=NOW,
        deleted=False,
    )


def api(name: str, placement: dict, port: int = 9001) -> StoredObject:
    spec = {"basePath": f"/{name}", "backends": [{"host": "127.0.0.1", "port": port}], "placement": placement}
    return stored("API", name, project="shop", spec=spec)


def expected(apis: dict[str, StoredObject], clusters: dict[str, dict[str, str]], cluster: str) -> set[str]:
    """A naive reading of the placement rules, independent of the projection's bookkeeping."""
    out = set()
    for name, obj in apis.items():
        placement = obj.spec["placement"]
        names = placement.get("clusters", [])
        selector = placement.get("clusterSelector")
        if cluster not in clusters:
            continue
        labels = clusters[cluster]
        if (
            (not names and selector is None)
            or cluster in names
            or (selector is not None and all(labels.get(k) == v for k, v in selector["matchLabels"].items()))
        ):
            out.add(resource_name("shop", name))
    return out


placements = st.one_of(
    st.just({}),
    st.builds(lambda cs: {"clusters": cs}, st.lists(st.sampled_from(CLUSTERS), min_size=1, max_size=2, unique=True)),
    st.builds(lambda r: {"clusterSelector": {"matchLabels": {"region": r}}}, st.sampled_from(REGIONS)),
)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.sampled_from(["a", "b", "c", "d"]), placements, st.integers(9001, 9003)),
        st.tuples(st.just("delete"), st.sampled_from(["a", "b", "c", "d"])),
        st.tuples(st.just("label"), st.sampled_from(CLUSTERS), st.sampled_from(REGIONS)),
        st.tuples(st.just("drop-cluster"), st.sampled_from(CLUSTERS)),
    ),
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(steps)
def test_every_cluster_holds_exactly_what_its_placement_selects(history: list[tuple]) -> None:
    cache = ResourceCache()
    projection = FleetProjection(cache)
    clusters = {c: {"region": "eu"} for c in CLUSTERS}
    projection.reset([], [stored("Cluster", c, labels=labels) for c, labels in clusters.items()])
    apis: dict[str, StoredObject] = {}
    for step in history:
        match step:
            case ("put", name, placement, port):
                apis[name] = api(name, placement, port)
                projection.upsert_object(apis[name])
            case ("delete", name):
                apis.pop(name, None)
                projection.remove_object(("API", "shop", name))
            case ("label", cluster, region):
                clusters[cluster] = {"region": region}
                projection.upsert_cluster(cluster, clusters[cluster])
            case ("drop-cluster", cluster):
                clusters.pop(cluster, None)
                projection.remove_cluster(cluster)
    for cluster in CLUSTERS:
        assert set(cache.resources(cluster, API_TYPE)) == expected(apis, clusters, cluster)

    rebuilt = ResourceCache()
    FleetProjection(rebuilt).reset(list(apis.values()), [stored("Cluster", c, labels=lb) for c, lb in clusters.items()])
    for cluster in clusters:
        assert cache.resources(cluster, API_TYPE) == rebuilt.resources(cluster, API_TYPE)


def test_an_object_is_packed_once_and_shared_by_every_cluster() -> None:
    cache = ResourceCache()
    projection = FleetProjection(cache)
    projection.reset([api("orders", {})], [stored("Cluster", c) for c in CLUSTERS])
    packed = [cache.resources(c, API_TYPE)["shop/orders"] for c in CLUSTERS]
    assert all(p is packed[0] for p in packed)


def test_an_unchanged_object_does_not_wake_any_cluster() -> None:
    cache = ResourceCache()
    projection = FleetProjection(cache)
    projection.reset([api("orders", {})], [stored("Cluster", c) for c in CLUSTERS])
    generations = [cache.generation(c) for c in CLUSTERS]
    projection.upsert_object(api("orders", {}))
    projection.upsert_cluster("edge-1", {})
    assert [cache.generation(c) for c in CLUSTERS] == generations


def test_an_object_that_no_longer_validates_is_withdrawn_not_delivered() -> None:
    cache = ResourceCache()
    projection = FleetProjection(cache)
    projection.reset([api("orders", {})], [stored("Cluster", "edge-1")])
    broken = stored("API", "orders", project="shop", spec={"basePath": "no-slash", "backends": []})
    projection.upsert_object(broken)
    assert dict(cache.resources("edge-1", API_TYPE)) == {}
