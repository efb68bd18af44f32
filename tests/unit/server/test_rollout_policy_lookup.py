"""A write looks up the policy that governs it in what the feeder holds, not in the store: an ungoverned write
is one store transaction, its own; and a policy written after the lookup's revision (by another replica)
refuses the write, which is checked again and then governed."""

from __future__ import annotations

import prometheus_client

from meshplane.model.registry import REGISTRY
from meshplane.model.rollouts import RolloutPolicySpec
from meshplane.server.main import current_api_lookup
from meshplane.server.objects import ObjectService
from meshplane.server.rollout_policies import KnownPolicies, RolloutPolicies
from meshplane.store.store import Store

from .feeders import feeder_of, running

API = REGISTRY.get("API")
POLICY = REGISTRY.get("RolloutPolicy")
CAREFUL = {"selector": {"kinds": ["API"]}, "waves": [{"name": "all"}]}


def api_doc(port: int) -> dict:
    backends = [{"host": "127.0.0.1", "port": port}]
    return {"metadata": {"name": "orders"}, "spec": {"basePath": "/orders", "backends": backends}}


def store_transactions() -> float:
    """Store operations run so far by this process, of every kind."""
    total = 0.0
    for metric in prometheus_client.REGISTRY.collect():
        if metric.name == "meshplane_store_transaction_duration_seconds":
            total += sum(s.value for s in metric.samples if s.name.endswith("_count"))
    return total


async def test_an_ungoverned_write_with_a_fed_lookup_runs_only_its_own_transaction(store: Store) -> None:
    await store.create("Project", "", "shop", spec={})
    _, feeder = feeder_of(store)
    apis = current_api_lookup(feeder, feeder.projection)
    service = ObjectService(store, apis, policy_lookup=feeder.known_policies)
    async with running(feeder):
        await service.put(API, "shop", "orders", api_doc(9001))
        await feeder.reached(store.committed)
    before = store_transactions()  # the feeder stopped: what runs now is the write's
    await service.put(API, "shop", "orders", api_doc(9002))
    assert store_transactions() - before == 1


async def test_the_feeder_knows_each_projects_policies_by_name(store: Store) -> None:
    await store.create("RolloutPolicy", "shop", "b-later", spec=CAREFUL)
    _, feeder = feeder_of(store)
    async with running(feeder):
        await store.create("RolloutPolicy", "shop", "a-first", spec=CAREFUL)
        await store.create("RolloutPolicy", "other", "elsewhere", spec=CAREFUL)
        await store.delete("RolloutPolicy", "shop", "b-later")
        await store.create("RolloutPolicy", "shop", "c-last", spec=CAREFUL)
        await feeder.reached(store.committed)
        known = await feeder.known_policies("shop", await store.current_revision())
    assert [name for name, _ in known.policies] == ["a-first", "c-last"]
    assert known.revision == await store.current_revision()


async def test_a_policy_written_after_the_lookup_refuses_the_write_which_is_then_governed(store: Store) -> None:
    await store.create("Project", "", "shop", spec={})
    stale_at = await store.current_revision()
    policy = await store.create("RolloutPolicy", "shop", "careful", spec=CAREFUL)  # by another replica, say
    asked: list[int] = []

    async def lagging(project: str, seen_from: int) -> KnownPolicies:
        """Behind the store until asked for what includes a later write, as a feeder is."""
        asked.append(seen_from)
        if seen_from <= stale_at:
            return KnownPolicies([], stale_at)
        known = RolloutPolicies()
        known.reset((await store.list("RolloutPolicy", project))[0])
        return KnownPolicies(known.of(project), await store.current_revision())

    service = ObjectService(store, policy_lookup=lagging)
    await service.put(API, "shop", "orders", api_doc(9001))
    assert asked == [0, policy.revision]
    rollout = await store.get("Rollout", "shop", "api-orders")
    assert rollout.spec["policy"] == "careful"
    assert RolloutPolicySpec.model_validate(rollout.spec["strategy"]).waves[0].name == "all"
