"""The Gateway API is served by default by an agent with Kubernetes and not at all when turned off; a
malformed address pool stops the agent at its settings; its resources join the translator's in one snapshot."""

from __future__ import annotations

from pathlib import Path

import pytest
from envoy.config.listener.v3 import listener_pb2
from pydantic import ValidationError
from typer.main import get_command

from meshplane.agent.gateway import LISTENER, with_resources
from meshplane.agent.kubernetes import gateway_api_program
from meshplane.agent.translate import EnvoyConfig
from meshplane.cli import app
from meshplane.config import AgentSettings
from meshplane.gatewayapi.program import program


def test_the_gateway_api_is_on_unless_turned_off(tmp_path: Path) -> None:
    assert gateway_api_program(AgentSettings(state_dir=tmp_path)) is program
    assert gateway_api_program(AgentSettings(state_dir=tmp_path, gateway_api=False)) is None


def test_a_malformed_address_pool_is_refused_with_its_field() -> None:
    with pytest.raises(ValidationError, match="gateway_api_addresses"):
        AgentSettings(gateway_api_addresses="127.0.0.60-127.0.0.10")


def test_the_agent_command_takes_the_gateway_api_flags() -> None:
    agent = get_command(app).commands["agent"]  # type: ignore[attr-defined]
    flags = {flag for param in agent.params for flag in (*param.opts, *param.secondary_opts)}
    assert {"--gateway-api", "--no-gateway-api", "--gateway-api-addresses"} <= flags


def test_gateway_api_resources_are_served_beside_the_translator_s() -> None:
    own = listener_pb2.Listener(name="gateway")
    config = EnvoyConfig(listeners=[own], routes=[], clusters=[], endpoints=[])
    theirs = listener_pb2.Listener(name="gwapi/shop/edge/http")
    served = with_resources(config, {LISTENER: {theirs.name: theirs}})
    assert [listener.name for listener in served.listeners] == ["gateway", "gwapi/shop/edge/http"]
    assert with_resources(config, {}) is config
