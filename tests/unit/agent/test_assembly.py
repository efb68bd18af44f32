"""The agent as `assemble` makes it: whole before it runs, stopped by bad settings before its state is
opened, and deciding from its holdings what its gateways are offered after they reject a version."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from envoy.service.discovery.v3 import discovery_pb2
from google.protobuf import any_pb2

from meshplane.agent.admin import AdminTokenError, config_dump
from meshplane.agent.gateway import PublishOutcome
from meshplane.agent.holdings import API_TYPE
from meshplane.agent.kubernetes import NoKubernetes
from meshplane.agent.runtime import Agent, assemble
from meshplane.agent.translate import EnvoyConfig
from meshplane.config import AgentSettings
from meshplane.model.registry import REGISTRY
from meshplane.model.status import DeliveryState
from meshplane.model.wire import to_message
from meshplane.proto.v1 import control_plane_pb2
from meshplane.xds.client import DeltaUpdate


def settings(tmp_path: Path, **fields: object) -> AgentSettings:
    return AgentSettings(insecure=True, in_cluster=False, state_dir=tmp_path / "state", **fields)  # type: ignore[arg-type]


@pytest.fixture
async def agent(tmp_path: Path) -> AsyncIterator[Agent]:
    assembled = await assemble(settings(tmp_path))
    try:
        yield assembled
    finally:
        await assembled.close()


class Gateways:
    """Gateways that reject every configuration routing under /bad and take any other."""

    async def publish(self, config: EnvoyConfig) -> PublishOutcome:
        if "/bad" in str(config.routes):
            return PublishOutcome(DeliveryState.FAILED, "bad route")
        return PublishOutcome(DeliveryState.APPLIED)


def api_update(version: str, base_path: str) -> DeltaUpdate:
    info = REGISTRY.get("API")
    api = REGISTRY.parse(
        {
            "kind": "API",
            "metadata": {"name": "orders", "project": "shop"},
            "spec": {"basePath": base_path, "backends": [{"host": "orders.example", "port": 80}]},
        }
    )
    body = any_pb2.Any(type_url=API_TYPE, value=to_message(info, api).SerializeToString())
    resource = discovery_pb2.Resource(name="shop/orders", version=version, resource=body)
    return DeltaUpdate(API_TYPE, [resource], [], f"nonce-{version}")


async def reported(agent: Agent) -> list[tuple[str, int]]:
    """(version, state) of every delivery the agent queued for the server."""
    out = []
    for _, body in await agent.state.pending_reports():
        request = control_plane_pb2.ReportStatusRequest.FromString(body)
        out += [(delivery.version, delivery.state) for delivery in request.deliveries]
    return out


async def test_an_agent_without_kubernetes_has_a_kubernetes_side_that_does_nothing(agent: Agent) -> None:
    assert isinstance(agent.kube, NoKubernetes)
    assert agent.kube.tasks() == {}
    assert agent.kube.services() is None
    await agent.rebuild()  # nothing held: an empty configuration, and nothing to apply


async def test_a_bad_admin_token_file_stops_the_agent_before_its_state_is_opened(tmp_path: Path) -> None:
    with pytest.raises(AdminTokenError):
        await assemble(settings(tmp_path, admin_token_file=tmp_path / "absent"))
    assert not (tmp_path / "state").exists()


async def test_a_rejected_version_is_kept_out_reported_failed_and_shown_in_the_dump(agent: Agent) -> None:
    agent.publisher = Gateways()  # type: ignore[assignment]

    await agent.apply_update(api_update("1", "/orders"))
    await agent.apply_update(api_update("2", "/bad"))

    holdings = agent.holdings()
    assert holdings.is_rejected(API_TYPE, "shop/orders", "2")
    served = agent.serving[API_TYPE]["shop/orders"]
    assert served.spec.base_path == "/orders"  # type: ignore[union-attr]
    assert await reported(agent) == [("1", control_plane_pb2.APPLIED), ("2", control_plane_pb2.FAILED)]
    dump = config_dump(holdings, agent.gateway_cache)
    [orders] = [entry for entry in dump["objects"] if entry["name"] == "shop/orders"]
    assert (orders["version"], orders["rejected"]) == ("2", True)
    assert dump["rejected"] == [{"kind": "API", "name": "shop/orders", "version": "2"}]

    await agent.apply_update(api_update("3", "/orders/v3"))
    assert not agent.holdings().is_rejected(API_TYPE, "shop/orders", "3")
    assert agent.serving[API_TYPE]["shop/orders"].spec.base_path == "/orders/v3"  # type: ignore[union-attr]
