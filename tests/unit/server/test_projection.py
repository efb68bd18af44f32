"""The fleet projection: every cluster's set equals what placement selects, after any history."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from meshplane.model.registry import REGISTRY
from meshplane.model.stored import StoredObject
from meshplane.model.wire import resource_name
from meshplane.server.projection import FleetProjection
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


cluster_steps = st.one_of(
    st.tuples(st.just("label"), st.sampled_from(CLUSTERS), st.sampled_from(REGIONS)),
    st.tuples(st.just("drop-cluster"), st.sampled_from(CLUSTERS)),
)
placements = st.one_of(
    st.just({}),
    st.builds(lambda cs: {"clusters": cs}, st.lists(st.sampled_from(CLUSTERS), min_size=1, max_size=2, unique=True)),
    st.builds(lambda r: {"clusterSelector": {"matchLabels": {"region": r}}}, st.sampled_from(REGIONS)),
)


def change_cluster(projection: FleetProjection, clusters: dict[str, dict[str, str]], step: tuple) -> None:
    """A history's cluster step: relabel a cluster, or drop it."""
    match step:
        case ("label", cluster, region):
            clusters[cluster] = {"region": region}
            projection.upsert_cluster(cluster, clusters[cluster])
        case ("drop-cluster", cluster):
            clusters.pop(cluster, None)
            projection.remove_cluster(cluster)


def assert_as_rebuilt(
    cache: ResourceCache, objects: Iterable[StoredObject], clusters: dict[str, dict[str, str]], type_urls: list[str]
) -> None:
    """What a history left in `cache` is what a fresh projection of where it ended holds."""
    rebuilt = ResourceCache()
    FleetProjection(rebuilt).reset(list(objects), [stored("Cluster", c, labels=lb) for c, lb in clusters.items()])
    for cluster in clusters:
        for type_url in type_urls:
            assert cache.resources(cluster, type_url) == rebuilt.resources(cluster, type_url)


steps = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.sampled_from(["a", "b", "c", "d"]), placements, st.integers(9001, 9003)),
        st.tuples(st.just("delete"), st.sampled_from(["a", "b", "c", "d"])),
        cluster_steps,
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
            case _:
                change_cluster(projection, clusters, step)
    for cluster in CLUSTERS:
        assert set(cache.resources(cluster, API_TYPE)) == expected(apis, clusters, cluster)
    assert_as_rebuilt(cache, apis.values(), clusters, [API_TYPE])


def test_an_object_is_packed_once_and_shared_by_every_cluster() -> None:
    cache = ResourceCache()
    projection = FleetProjection(cache)
    projection.reset([api("orders", {})], [stored("Cluster", c) for c in CLUSTERS])
    packed = [cache.resources(c, API_TYPE)["shop/orders"] for c in CLUSTERS]
    assert all(p is packed[0] for p in packed)


def test_objects_placed_alike_keep_one_placement_set_as_clusters_come_and_go() -> None:
    projection = FleetProjection(ResourceCache())
    projection.reset([api(name, {}) for name in ("orders", "items", "carts")], [stored("Cluster", CLUSTERS[0])])
    for cluster in CLUSTERS[1:]:
        projection.upsert_cluster(cluster, {})
    projection.remove_cluster(CLUSTERS[0])

    sets = [projection.placed[("API", "shop", name)] for name in ("orders", "items", "carts")]
    assert sets[0] == frozenset(CLUSTERS[1:])
    assert all(placed is sets[0] for placed in sets)


def test_a_cluster_change_marks_for_status_only_the_objects_it_moves() -> None:
    projection = FleetProjection(ResourceCache())
    everywhere, eu_only = api("orders", {}), api("items", {"clusterSelector": {"matchLabels": {"region": "eu"}}})
    projection.reset([everywhere, eu_only], [stored("Cluster", c) for c in CLUSTERS])
    projection.take_dirty()

    projection.upsert_cluster("edge-1", {"region": "eu"})
    assert projection.take_dirty() == {("API", "shop", "items")}
    projection.upsert_cluster("edge-1", {"region": "eu", "tier": "edge"})
    assert projection.take_dirty() == set()
    projection.remove_cluster("edge-2")
    assert projection.take_dirty() == {("API", "shop", "orders")}


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


# --- followers: subscriptions, applications, keys and policies go where the APIs they touch go -------------------

SUBSCRIPTION_TYPE = REGISTRY.get("Subscription").type_url
APPLICATION_TYPE = REGISTRY.get("Application").type_url
KEY_TYPE = REGISTRY.get("ApplicationKey").type_url
POLICY_TYPE = REGISTRY.get("RateLimitPolicy").type_url
LABELS = {"edge-1": {"region": "eu"}, "edge-2": {"region": "us"}, "core-1": {"region": "eu"}}


def subscription(name: str, api_name: str, plan: str = "default") -> StoredObject:
    """A subscription of application `mobile` in `shop`."""
    return stored("Subscription", name, project="shop", spec={"application": "mobile", "api": api_name, "plan": plan})


def application() -> StoredObject:
    return stored("Application", "mobile", project="shop")


def application_key(name: str) -> StoredObject:
    """A key record of application `mobile`."""
    spec = {"application": "mobile", "created": "2026-01-01T00:00:00Z", "sha256": "0" * 64}
    return stored("ApplicationKey", name, project="shop", spec=spec)


def policy(name: str, target: dict) -> StoredObject:
    spec = {"target": target, "requestsPerUnit": 10, "unit": "minute"}
    return stored("RateLimitPolicy", name, project="shop", spec=spec)


def fleet(*objects: StoredObject) -> tuple[FleetProjection, ResourceCache]:
    """A projection over clusters edge-1 (eu), edge-2 (us) and core-1 (eu) holding `objects`."""
    cache = ResourceCache()
    projection = FleetProjection(cache)
    projection.reset(list(objects), [stored("Cluster", c, labels=labels) for c, labels in LABELS.items()])
    return projection, cache


def holders(cache: ResourceCache, type_url: str, name: str) -> set[str]:
    """The clusters that hold one object of project `shop`."""
    return {c for c in CLUSTERS if resource_name("shop", name) in cache.resources(c, type_url)}


def test_a_subscription_goes_exactly_where_its_api_goes() -> None:
    projection, cache = fleet(api("orders", {"clusters": ["edge-1"]}), subscription("mobile-orders", "orders"))
    assert holders(cache, SUBSCRIPTION_TYPE, "mobile-orders") == {"edge-1"}

    projection.upsert_object(api("orders", {"clusterSelector": {"matchLabels": {"region": "eu"}}}))
    assert holders(cache, SUBSCRIPTION_TYPE, "mobile-orders") == {"edge-1", "core-1"}

    projection.upsert_cluster("core-1", {"region": "us"})
    projection.upsert_cluster("edge-2", {"region": "eu"})
    assert holders(cache, SUBSCRIPTION_TYPE, "mobile-orders") == {"edge-1", "edge-2"}

    projection.remove_cluster("edge-1")
    assert holders(cache, SUBSCRIPTION_TYPE, "mobile-orders") == {"edge-2"}


def test_a_subscription_written_before_its_api_follows_it_once_it_exists() -> None:
    projection, cache = fleet(subscription("mobile-orders", "orders"))
    assert holders(cache, SUBSCRIPTION_TYPE, "mobile-orders") == set()

    projection.upsert_object(api("orders", {"clusters": ["edge-2"]}))

    assert holders(cache, SUBSCRIPTION_TYPE, "mobile-orders") == {"edge-2"}


def test_an_application_and_its_keys_go_wherever_the_project_has_an_api() -> None:
    elsewhere = stored("API", "orders", project="other", spec=api("orders", {"clusters": ["core-1"]}).spec)
    projection, cache = fleet(
        api("orders", {"clusters": ["edge-1"]}),
        api("billing", {"clusters": ["edge-2"]}),
        elsewhere,
        application(),
        application_key("k-1"),
    )
    assert holders(cache, APPLICATION_TYPE, "mobile") == {"edge-1", "edge-2"}
    assert holders(cache, KEY_TYPE, "k-1") == {"edge-1", "edge-2"}

    projection.upsert_object(api("billing", {"clusters": ["edge-1"]}))
    projection.upsert_object(application_key("k-2"))
    assert holders(cache, APPLICATION_TYPE, "mobile") == {"edge-1"}
    assert holders(cache, KEY_TYPE, "k-1") == holders(cache, KEY_TYPE, "k-2") == {"edge-1"}

    projection.upsert_object(api("orders", {}))
    assert holders(cache, APPLICATION_TYPE, "mobile") == set(CLUSTERS)
    assert holders(cache, KEY_TYPE, "k-2") == set(CLUSTERS)


def test_an_application_goes_nowhere_while_its_project_has_no_api() -> None:
    projection, cache = fleet(application(), application_key("k-1"))
    assert holders(cache, APPLICATION_TYPE, "mobile") == holders(cache, KEY_TYPE, "k-1") == set()

    projection.upsert_object(api("orders", {"clusters": ["core-1"]}))
    assert holders(cache, APPLICATION_TYPE, "mobile") == holders(cache, KEY_TYPE, "k-1") == {"core-1"}

    projection.remove_object(("API", "shop", "orders"))
    assert holders(cache, APPLICATION_TYPE, "mobile") == holders(cache, KEY_TYPE, "k-1") == set()


def test_the_keys_of_a_deleted_application_go_nowhere() -> None:
    projection, cache = fleet(api("orders", {}), application(), application_key("k-1"))

    projection.remove_object(("Application", "shop", "mobile"))

    assert holders(cache, KEY_TYPE, "k-1") == set()


def test_a_policy_follows_its_target_api() -> None:
    operation = {"kind": "Operation", "name": "orders", "operation": {"method": "GET", "path": "/items"}}
    projection, cache = fleet(
        api("orders", {"clusters": ["edge-1"]}),
        api("billing", {"clusters": ["edge-2"]}),
        policy("whole", {"kind": "API", "name": "orders"}),
        policy("one-operation", operation),
    )
    assert holders(cache, POLICY_TYPE, "whole") == holders(cache, POLICY_TYPE, "one-operation") == {"edge-1"}

    projection.upsert_object(api("orders", {"clusterSelector": {"matchLabels": {"region": "eu"}}}))
    assert holders(cache, POLICY_TYPE, "whole") == holders(cache, POLICY_TYPE, "one-operation") == {"edge-1", "core-1"}

    projection.upsert_object(policy("whole", {"kind": "API", "name": "billing"}))
    assert holders(cache, POLICY_TYPE, "whole") == {"edge-2"}


def test_a_plan_policy_follows_the_subscriptions_on_that_plan() -> None:
    projection, cache = fleet(
        api("orders", {"clusters": ["edge-1"]}),
        api("billing", {"clusters": ["edge-2"]}),
        api("search", {"clusters": ["core-1"]}),
        subscription("a", "orders", plan="gold"),
        subscription("b", "billing", plan="silver"),
        policy("gold", {"kind": "SubscriptionPlan", "name": "gold"}),
        policy("gold-on-search", {"kind": "SubscriptionPlan", "name": "gold", "api": "search"}),
    )
    assert holders(cache, POLICY_TYPE, "gold") == {"edge-1"}
    assert holders(cache, POLICY_TYPE, "gold-on-search") == {"core-1"}

    projection.upsert_object(subscription("b", "billing", plan="gold"))
    assert holders(cache, POLICY_TYPE, "gold") == {"edge-1", "edge-2"}

    projection.remove_object(("Subscription", "shop", "a"))
    projection.upsert_object(api("billing", {"clusters": ["core-1"]}))
    assert holders(cache, POLICY_TYPE, "gold") == {"core-1"}


def test_deleting_the_api_withdraws_its_subscription_and_policies() -> None:
    projection, cache = fleet(
        api("orders", {}),
        api("billing", {"clusters": ["edge-2"]}),
        subscription("mobile-orders", "orders", plan="gold"),
        policy("whole", {"kind": "API", "name": "orders"}),
        policy("gold", {"kind": "SubscriptionPlan", "name": "gold"}),
        application(),
    )
    assert holders(cache, SUBSCRIPTION_TYPE, "mobile-orders") == set(CLUSTERS)

    projection.remove_object(("API", "shop", "orders"))

    for type_url, name in [(SUBSCRIPTION_TYPE, "mobile-orders"), (POLICY_TYPE, "whole"), (POLICY_TYPE, "gold")]:
        assert holders(cache, type_url, name) == set()
    assert holders(cache, APPLICATION_TYPE, "mobile") == {"edge-2"}


follower_steps = st.lists(
    st.one_of(
        st.tuples(st.just("api"), st.sampled_from(["a", "b"]), placements),
        st.tuples(st.just("drop-api"), st.sampled_from(["a", "b"])),
        st.tuples(
            st.just("subscribe"),
            st.sampled_from(["s1", "s2"]),
            st.sampled_from(["a", "b"]),
            st.sampled_from(["gold", "free"]),
        ),
        st.tuples(st.just("unsubscribe"), st.sampled_from(["s1", "s2"])),
        st.tuples(st.just("application"), st.booleans()),
        cluster_steps,
    ),
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(follower_steps)
def test_followers_after_any_history_are_where_a_fresh_projection_puts_them(history: list[tuple]) -> None:
    fixed = [
        application_key("k-1"),
        policy("on-a", {"kind": "API", "name": "a"}),
        policy("gold", {"kind": "SubscriptionPlan", "name": "gold"}),
    ]
    projection, cache = fleet(*fixed)
    clusters = dict(LABELS)
    objects = {(o.kind, o.name): o for o in fixed}
    for step in history:
        match step:
            case ("api", name, placement):
                objects[("API", name)] = api(name, placement)
                projection.upsert_object(objects[("API", name)])
            case ("drop-api", name):
                objects.pop(("API", name), None)
                projection.remove_object(("API", "shop", name))
            case ("subscribe", name, api_name, plan):
                objects[("Subscription", name)] = subscription(name, api_name, plan)
                projection.upsert_object(objects[("Subscription", name)])
            case ("unsubscribe", name):
                objects.pop(("Subscription", name), None)
                projection.remove_object(("Subscription", "shop", name))
            case ("application", True):
                objects[("Application", "mobile")] = application()
                projection.upsert_object(objects[("Application", "mobile")])
            case ("application", False):
                objects.pop(("Application", "mobile"), None)
                projection.remove_object(("Application", "shop", "mobile"))
            case _:
                change_cluster(projection, clusters, step)

    apis = {name: obj for (kind, name), obj in objects.items() if kind == "API"}
    for (kind, name), obj in objects.items():
        if kind == "Subscription":
            wanted = {c for c in CLUSTERS if resource_name("shop", obj.spec["api"]) in expected(apis, clusters, c)}
            assert holders(cache, SUBSCRIPTION_TYPE, name) == wanted
    assert_as_rebuilt(cache, objects.values(), clusters, [SUBSCRIPTION_TYPE, APPLICATION_TYPE, KEY_TYPE, POLICY_TYPE])


def api_at(name: str, base_path: str) -> StoredObject:
    spec = {"basePath": base_path, "backends": [{"host": "127.0.0.1", "port": 9001}]}
    return stored("API", name, project="shop", spec=spec)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c", "d"]), st.sampled_from(["/orders", "/orders/v2", "/billing", "/{t}"])
        ),
        max_size=12,
    ),
    st.sampled_from(["/orders/x", "/billing", "/{tenant}/x", "/other"]),
)
def test_the_route_catalog_offers_every_api_whose_first_segment_may_meet(
    writes: list[tuple[str, str]], probe_path: str
) -> None:
    """APIs moved between buckets, re-written and removed: the catalog for a probe holds exactly the live APIs
    whose first basePath segment equals the probe's or either is templated."""
    projection = FleetProjection(ResourceCache())
    live: dict[str, str] = {}
    for name, base_path in writes:
        if live.get(name) == base_path:
            projection.remove_object(("API", "shop", name))
            del live[name]
        else:
            projection.upsert_object(api_at(name, base_path))
            live[name] = base_path
    probe = projection.deliverable(api_at("probe", probe_path), None)
    assert probe is not None

    _, offered = projection.api_lookup(probe.spec)

    def first(path: str) -> str:
        return path.split("/")[1]

    def may_meet(path: str) -> bool:
        a, b = first(path), first(probe_path)
        return a == b or a.startswith("{") or b.startswith("{")

    assert sorted(name for _, name, _ in offered) == sorted(n for n, p in live.items() if may_meet(p))


def test_a_cluster_made_api_goes_to_its_own_cluster_alone_and_nothing_else_a_cluster_made_goes_anywhere() -> None:
    projection = FleetProjection(ResourceCache())
    projection.reset([], [stored("Cluster", name) for name in CLUSTERS])
    made = replace(api("local", {"clusters": ["edge-2"]}), origin="cluster/edge-1")
    key_set = replace(stored("KeySet", "attacker", spec={"issuer": "meshplane", "keys": []}), origin="cluster/edge-1")

    projection.upsert_object(made)
    projection.upsert_object(key_set)

    held = {cluster: projection.cluster_resources(cluster) for cluster in CLUSTERS}
    assert [c for c in CLUSTERS if "shop/local" in held[c][API_TYPE]] == ["edge-1"]
    key_sets = REGISTRY.get("KeySet").type_url
    assert not any("attacker" in held[c][key_sets] for c in CLUSTERS)
