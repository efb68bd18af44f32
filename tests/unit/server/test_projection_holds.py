"""Holds: while a change rolls out, each cluster its waves have not reached keeps the version it had, whatever
else happens to the object, its placement or the clusters; when the rollout ends every cluster gets the newest."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from meshplane.server.projection import DeliveredObject, FleetProjection, Hold
from meshplane.xds.cache import ResourceCache
from tests.unit.server.test_projection import API_TYPE, CLUSTERS, api, stored

KEY = ("API", "shop", "orders")


def version_at(cache: ResourceCache, cluster: str) -> str | None:
    found = cache.resources(cluster, API_TYPE).get("shop/orders")
    return found.version if found is not None else None


def fleet(placement: dict | None = None) -> tuple[ResourceCache, FleetProjection, DeliveredObject]:
    cache = ResourceCache()
    projection = FleetProjection(cache)
    projection.reset([api("orders", placement or {}, port=9001)], [stored("Cluster", c) for c in CLUSTERS])
    baseline = projection.objects[KEY]
    return cache, projection, baseline


def test_unreleased_clusters_keep_the_baseline_and_released_ones_get_the_change() -> None:
    cache, projection, baseline = fleet()
    projection.hold(KEY, Hold(frozenset({"edge-1"}), {}, baseline))
    projection.upsert_object(api("orders", {}, port=9002))
    newest = projection.objects[KEY].resource.version
    assert {c: version_at(cache, c) for c in CLUSTERS} == {
        "edge-1": newest,
        "edge-2": baseline.resource.version,
        "core-1": baseline.resource.version,
    }
    assert projection.served_versions(KEY) == {c: version_at(cache, c) for c in CLUSTERS}


def test_releasing_more_clusters_and_ending_the_hold_gives_them_the_newest() -> None:
    cache, projection, baseline = fleet()
    projection.hold(KEY, Hold(frozenset(), {}, baseline))
    projection.upsert_object(api("orders", {}, port=9002))
    newest = projection.objects[KEY].resource.version
    assert {version_at(cache, c) for c in CLUSTERS} == {baseline.resource.version}
    projection.hold(KEY, Hold(frozenset({"edge-1", "edge-2"}), {}, baseline))
    assert version_at(cache, "core-1") == baseline.resource.version
    projection.hold(KEY, None)
    assert {version_at(cache, c) for c in CLUSTERS} == {newest}


def test_a_new_object_under_a_hold_reaches_released_clusters_only() -> None:
    cache = ResourceCache()
    projection = FleetProjection(cache)
    projection.reset([], [stored("Cluster", c) for c in CLUSTERS])
    projection.hold(KEY, Hold(frozenset({"edge-1"}), {}, None))
    projection.upsert_object(api("orders", {}))
    assert [c for c in CLUSTERS if version_at(cache, c) is not None] == ["edge-1"]


def test_a_held_cluster_keeps_the_baseline_within_the_baseline_placement_only() -> None:
    cache, projection, baseline = fleet({"clusters": ["edge-1", "edge-2"]})
    projection.hold(KEY, Hold(frozenset({"core-1"}), {}, baseline))
    projection.upsert_object(api("orders", {"clusters": ["core-1"]}, port=9002))
    assert version_at(cache, "edge-2") == baseline.resource.version
    assert version_at(cache, "core-1") == projection.objects[KEY].resource.version
    projection.hold(KEY, None)
    assert [c for c in CLUSTERS if version_at(cache, c) is not None] == ["core-1"]


def test_a_deleted_object_leaves_every_cluster_whatever_it_was_held_to() -> None:
    cache, projection, baseline = fleet()
    projection.hold(KEY, Hold(frozenset({"edge-1"}), {}, baseline))
    projection.upsert_object(api("orders", {}, port=9002))
    projection.remove_object(KEY)
    assert all(version_at(cache, c) is None for c in CLUSTERS)
    assert KEY not in projection.holds


def test_a_cluster_that_joins_mid_rollout_gets_the_version_its_wave_allows() -> None:
    cache, projection, baseline = fleet()
    projection.hold(KEY, Hold(frozenset({"edge-1"}), {}, baseline))
    projection.upsert_object(api("orders", {}, port=9002))
    projection.upsert_cluster("late-1", {})
    assert version_at(cache, "late-1") == baseline.resource.version


def test_a_rebuild_from_a_snapshot_serves_the_same_holds() -> None:
    cache, projection, baseline = fleet()
    hold = Hold(frozenset({"edge-1"}), {"edge-2": None}, baseline)
    projection.hold(KEY, hold)
    projection.upsert_object(api("orders", {}, port=9002))
    before = {c: version_at(cache, c) for c in CLUSTERS}
    rebuilt = ResourceCache()
    FleetProjection(rebuilt).reset(
        [api("orders", {}, port=9002)], [stored("Cluster", c) for c in CLUSTERS], holds={KEY: hold}
    )
    assert {c: version_at(rebuilt, c) for c in CLUSTERS} == before
    assert before["edge-2"] is None


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("put"), st.integers(9001, 9004)),
            st.tuples(st.just("release"), st.sampled_from(CLUSTERS)),
            st.tuples(st.just("relabel"), st.sampled_from(CLUSTERS)),
        ),
        max_size=20,
    )
)
def test_no_unreleased_cluster_ever_holds_anything_but_the_baseline(steps: list[tuple]) -> None:
    cache, projection, baseline = fleet()
    released: set[str] = set()
    projection.hold(KEY, Hold(frozenset(), {}, baseline))
    for step in steps:
        match step:
            case ("put", port):
                projection.upsert_object(api("orders", {}, port=port))
            case ("release", cluster):
                released.add(cluster)
                projection.hold(KEY, Hold(frozenset(released), {}, baseline))
            case ("relabel", cluster):
                projection.upsert_cluster(cluster, {"region": "eu"})
        newest = projection.objects[KEY].resource.version
        for cluster in CLUSTERS:
            expected = newest if cluster in released else baseline.resource.version
            assert version_at(cache, cluster) == expected
