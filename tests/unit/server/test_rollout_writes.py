"""Governed writes: the Rollout is committed with the change and ahead of it, so that no reader of the event log
meets the change first; a newer write supersedes an active rollout; ungoverned writes are untouched."""

from __future__ import annotations

from typing import Any

import pytest

from meshplane.model.registry import REGISTRY
from meshplane.model.resource import InvalidObject
from meshplane.model.rollouts import Phase, RolloutSpec
from meshplane.server.objects import ObjectService
from meshplane.store.errors import NotFound
from meshplane.store.store import Store

API = REGISTRY.get("API")
POLICY = REGISTRY.get("RolloutPolicy")
CAREFUL = {"selector": {"kinds": ["API"], "matchLabels": {"tier": "prod"}}, "waves": [{"name": "all"}]}


def api_doc(port: int, tier: str = "prod") -> dict[str, Any]:
    return {
        "metadata": {"name": "orders", "labels": {"tier": tier}},
        "spec": {"basePath": "/orders", "backends": [{"host": "127.0.0.1", "port": port}]},
    }


@pytest.fixture
async def service(store: Store) -> ObjectService:
    await store.create("Project", "", "shop", spec={})
    return ObjectService(store)


async def rollout_of(store: Store) -> RolloutSpec:
    return RolloutSpec.model_validate((await store.get("Rollout", "shop", "api-orders")).spec)


async def test_an_ungoverned_write_starts_no_rollout(service: ObjectService, store: Store) -> None:
    await service.put(POLICY, "shop", "careful", {"spec": CAREFUL})
    await service.put(API, "shop", "orders", api_doc(9001, tier="dev"))
    with pytest.raises(NotFound):
        await store.get("Rollout", "shop", "api-orders")


async def test_a_governed_change_commits_its_rollout_first_in_the_same_transaction(
    service: ObjectService, store: Store
) -> None:
    await service.put(API, "shop", "orders", api_doc(9001))
    baseline = await store.get("API", "shop", "orders")
    await service.put(POLICY, "shop", "careful", {"spec": CAREFUL})
    before = await store.current_revision()
    changed, _ = await service.put(API, "shop", "orders", api_doc(9002))
    events, _ = await store.changes_since(before)
    assert [(e.kind, e.revision) for e in events] == [("Rollout", before + 1), ("API", before + 2)]
    rollout = await rollout_of(store)
    assert (rollout.from_revision, rollout.to_revision) == (
        baseline.revision,
        int(changed.metadata.resource_version or 0),
    )
    assert rollout.phase is Phase.PROGRESSING


async def test_the_rollout_starts_from_a_version_the_history_keeps_whatever_status_was_written_since(
    service: ObjectService, store: Store
) -> None:
    await service.put(API, "shop", "orders", api_doc(9001))
    await store.set_status("API", "shop", "orders", {"clusters": [{"cluster": "a", "state": "Applied"}]})
    await service.put(POLICY, "shop", "careful", {"spec": CAREFUL})
    await service.put(API, "shop", "orders", api_doc(9002))

    rollout = await rollout_of(store)
    assert rollout.from_revision is not None
    kept = await store.version_at("API", "shop", "orders", rollout.from_revision)
    assert kept is not None and kept.spec["backends"][0]["port"] == 9001


async def test_a_governed_create_rolls_out_from_nothing(service: ObjectService, store: Store) -> None:
    await service.put(POLICY, "shop", "careful", {"spec": CAREFUL})
    created, _ = await service.put(API, "shop", "orders", api_doc(9001))
    rollout = await rollout_of(store)
    assert (rollout.from_revision, rollout.to_revision) == (None, int(created.metadata.resource_version or 0))


async def test_a_newer_write_supersedes_the_active_rollout_and_keeps_its_baseline(
    service: ObjectService, store: Store
) -> None:
    await service.put(API, "shop", "orders", api_doc(9001))
    baseline = await store.get("API", "shop", "orders")
    await service.put(POLICY, "shop", "careful", {"spec": CAREFUL})
    await service.put(API, "shop", "orders", api_doc(9002))
    before = await store.current_revision()
    await service.put(API, "shop", "orders", api_doc(9003))
    events, _ = await store.changes_since(before)
    assert [e.kind for e in events] == ["Rollout", "Rollout", "API"]  # the old one's end, the new one, the change
    newest = await rollout_of(store)
    assert newest.from_revision == baseline.revision
    assert newest.held == {}  # the old rollout had released no cluster


async def test_a_write_after_the_policy_went_ends_the_active_rollout_and_starts_none(
    service: ObjectService, store: Store
) -> None:
    await service.put(POLICY, "shop", "careful", {"spec": CAREFUL})
    await service.put(API, "shop", "orders", api_doc(9001))
    await service.delete(POLICY, "shop", "careful")
    await service.put(API, "shop", "orders", api_doc(9002))
    ended = await rollout_of(store)
    assert ended.phase is Phase.SUPERSEDED


async def test_an_unchanged_write_touches_no_rollout(service: ObjectService, store: Store) -> None:
    await service.put(POLICY, "shop", "careful", {"spec": CAREFUL})
    await service.put(API, "shop", "orders", api_doc(9001))
    revision = await store.current_revision()
    await service.put(API, "shop", "orders", api_doc(9001))
    assert await store.current_revision() == revision


async def test_a_policy_naming_a_kind_that_is_not_delivered_is_refused(service: ObjectService) -> None:
    with pytest.raises(InvalidObject) as refused:
        await service.put(POLICY, "shop", "careful", {"spec": {**CAREFUL, "selector": {"kinds": ["Project"]}}})
    assert refused.value.errors[0].path == "spec.selector.kinds[0]"
