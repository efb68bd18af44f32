"""The cluster's own APIs: validated like the control plane's copy, kept in the agent's state across
restarts at a version that follows their content, and their `Accepted` condition written only on change."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from meshplane.agent.kube.operator import accepted_conditions, local_api
from meshplane.agent.local import LocalAPIs
from meshplane.agent.state import LocalState
from meshplane.model.registry import REGISTRY
from meshplane.model.resource import API_VERSION, InvalidObject


def cr(base_path: str = "/orders", weight: int = 100, **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "API",
        "metadata": {"name": "orders", "namespace": "shop", "generation": 2, "labels": {"team": "a"}},
        "spec": {"basePath": base_path, "backends": [{"host": "orders", "port": 80, "weight": weight}]},
        "status": status,
    }


def test_a_cr_becomes_the_model_the_control_plane_validates_with() -> None:
    api = local_api(cr())
    assert (api.metadata.project, api.metadata.name, api.metadata.labels) == ("shop", "orders", {"team": "a"})
    assert api.spec.base_path == "/orders"
    with pytest.raises(InvalidObject, match="weight"):
        local_api(cr(weight=0))


async def test_kept_apis_survive_a_restart_and_change_version_with_their_content(tmp_path: Path) -> None:
    state = await LocalState.open(tmp_path)
    local = LocalAPIs.load(state)
    assert await local.keep("shop/orders", local_api(cr()))
    assert not await local.keep("shop/orders", local_api(cr()))  # the same content: nothing to serve anew
    first = local.versions()["shop/orders"]
    assert await local.keep("shop/orders", local_api(cr("/v2")))
    assert local.versions()["shop/orders"] != first
    assert state.versions(REGISTRY.get("API").type_url) == {}  # never sent as a delivered version
    await state.close()

    state = await LocalState.open(tmp_path)
    local = LocalAPIs.load(state)
    assert local.objects["shop/orders"].spec.base_path == "/v2"
    assert await local.keep("shop/orders", None)
    assert not await local.keep("shop/orders", None)
    await state.close()
    state = await LocalState.open(tmp_path)
    assert LocalAPIs.load(state).objects == {}
    await state.close()


def test_the_accepted_condition_is_written_when_it_would_change() -> None:
    served = accepted_conditions(cr(), None)
    assert served is not None
    (condition,) = served
    assert (condition["status"], condition["reason"], condition["observedGeneration"]) == ("True", "Served", 2)
    assert accepted_conditions(cr(conditions=served), None) is None

    other = {"type": "Ready", "status": "True"}
    refused = accepted_conditions(cr(conditions=[other, *served]), "spec.backends: no weight")
    assert refused is not None
    assert refused[0] == other
    assert (refused[1]["status"], refused[1]["reason"], refused[1]["message"]) == (
        "False",
        "Invalid",
        "spec.backends: no weight",
    )
    newer = cr(conditions=served)
    newer["metadata"]["generation"] = 3
    again = accepted_conditions(newer, None)
    assert again is not None and again[0]["observedGeneration"] == 3
    assert again[0]["lastTransitionTime"] == condition["lastTransitionTime"]  # still served: no transition
