"""A user's action on a rollout is judged on the rollout as it stands when it is written: the leader's driver
writes rollouts on its own (bakes beginning, figures, waves released), and an action that lands meanwhile is
weighed again, never refused for it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from meshplane.model.rollouts import Phase, RolloutPolicySpec, RolloutSpec, TargetRef
from meshplane.server.app import create_app
from meshplane.server.projection import FleetProjection
from meshplane.server.rollout_plan import start
from meshplane.server.rollout_writes import ROLLOUT
from meshplane.store.store import Store
from meshplane.xds.cache import ResourceCache
from meshplane_testing.north import north_client

pytestmark = pytest.mark.timeout(60)

NAME = "api-orders"
PAUSE = f"/v1/projects/shop/rollouts/{NAME}/pause"


def progressing() -> RolloutSpec:
    strategy = RolloutPolicySpec.model_validate({"waves": [{"name": "canary", "clusters": ["a"], "bake": "30s"}]})
    spec = RolloutSpec(target=TargetRef(kind="API", name="orders"), policy="careful", strategy=strategy, to_revision=2)
    return start(spec, datetime.now(UTC))


@pytest.fixture
async def client(store: Store) -> AsyncIterator[httpx.AsyncClient]:
    async with north_client(create_app(store, projection=FleetProjection(ResourceCache())), ["shop"]) as http:
        await store.put(ROLLOUT, "shop", NAME, spec=progressing().to_wire())
        yield http


def driver_writes_after_the_read(store: Store, monkeypatch: pytest.MonkeyPatch, spec: RolloutSpec) -> list[int]:
    """Once the action has read the rollout, the driver writes `spec` to it; the revisions it wrote."""
    read = store.get
    written: list[int] = []

    async def read_then_driver(kind: str, project: str, name: str) -> Any:
        found = await read(kind, project, name)
        if kind == ROLLOUT and not written:
            stored, _ = await store.put(ROLLOUT, project, name, spec=spec.to_wire())
            written.append(stored.revision)
        return found

    monkeypatch.setattr(store, "get", read_then_driver)
    return written


async def test_a_pause_that_lands_as_the_driver_writes_is_taken(
    client: httpx.AsyncClient, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    stepped = progressing().model_copy(update={"reason": "the canary's bake began"})
    written = driver_writes_after_the_read(store, monkeypatch, stepped)

    answer = await client.post(PAUSE)

    assert written, "the driver wrote nothing between the action's read and its write"
    assert answer.status_code == 200, answer.text
    assert answer.json()["spec"]["phase"] == Phase.PAUSED.value


async def test_a_pause_that_lands_as_the_rollout_ends_says_it_ended(
    client: httpx.AsyncClient, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    driver_writes_after_the_read(store, monkeypatch, progressing().model_copy(update={"phase": Phase.SUCCEEDED}))

    answer = await client.post(PAUSE)

    assert answer.status_code == 409, answer.text
    assert "only a progressing rollout can be paused" in answer.json()["detail"]
    assert (await store.get(ROLLOUT, "shop", NAME)).spec["phase"] == Phase.SUCCEEDED.value
