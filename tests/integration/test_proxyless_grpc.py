"""A second, independent xDS client: gRPC's proxyless client reaches a gRPC API through the agent's xDS.

Server, agent, gRPC backends and the clients are real processes on loopback. A channel to
`xds:///echo.default` takes the agent's LDS, RDS, CDS and EDS for the API `echo` in project `default`;
its calls reaching the backend show the agent speaks xDS as gRPC reads it, not only as Envoy tolerates it.
An Envoy gateway on the same agent gets the same snapshot and must neither reject nor mind the extra
resources meant for gRPC clients.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from meshplane_testing.documents import api, backend
from meshplane_testing.envoy import EnvoyProcess, envoy_binary, run_envoy
from meshplane_testing.eventually import eventually
from meshplane_testing.grpc_echo import ECHO_METHOD, run_echo
from meshplane_testing.meshplane import run_agent, run_server
from meshplane_testing.north import blocking
from meshplane_testing.proxyless import REQUEST, CallResult, call_proxyless, call_until

TARGET = "xds:///echo.default"


def assert_reached(result: CallResult, backend: str) -> None:
    assert result.reached, f"last outcome: {result.last}\n{result.log[-3000:]}"
    assert result.last == f"{backend}:{REQUEST.decode()}"


def test_proxyless_grpc_client_follows_the_api_to_its_backend(tmp_path: Path) -> None:
    with (
        run_echo("one") as port_one,
        run_echo("two") as port_two,
        run_server(tmp_path) as server,
        run_agent(tmp_path, "edge-1", server.grpc_address) as agent,
        blocking(server.client()) as north,
    ):
        north.put(api("echo", basePath="/", backends=[backend(port_one, protocol="grpc")]))
        first = call_proxyless(tmp_path, agent.xds_port, TARGET, ECHO_METHOD, "one:", name="client-1")
        assert_reached(first, "one")

        north.put(api("echo", basePath="/", backends=[backend(port_two, protocol="grpc")]))
        second = call_proxyless(tmp_path, agent.xds_port, TARGET, ECHO_METHOD, "two:", name="client-2")
        assert_reached(second, "two")


def envoy_counters(envoy: EnvoyProcess, suffix: str) -> dict[str, int]:
    """Envoy's counters whose names end in `suffix`, e.g. every xDS subscription's `update_rejected`."""
    status, body = envoy.admin(f"/stats?filter={suffix}$")
    assert status == 200, body
    return {name: int(value) for name, value in (line.split(": ") for line in body.splitlines() if line)}


@pytest.mark.envoy
def test_envoy_gateway_skips_the_proxyless_resources_and_still_serves(tmp_path: Path) -> None:
    envoy_binary()
    with (
        run_echo("one") as port_one,
        run_server(tmp_path) as server,
        run_agent(tmp_path, "edge-1", server.grpc_address) as agent,
        run_envoy(tmp_path, "gw-1", agent.xds_port) as envoy,
        blocking(server.client()) as north,
    ):
        envoy.wait_listener(agent.gateway_port)
        north.put(api("echo", basePath="/", backends=[backend(port_one, protocol="grpc")]))
        assert_reached(call_proxyless(tmp_path, agent.xds_port, TARGET, ECHO_METHOD, "one:", name="client"), "one")

        reached, last = call_until(f"127.0.0.1:{agent.gateway_port}", ECHO_METHOD, "one:", 15.0)
        assert reached, f"through the gateway: {last}\n{envoy.log()[-3000:]}"
        # The listener set with the API listener in it arrived (a second LDS update) and was taken, not refused.
        eventually(
            lambda: envoy_counters(envoy, "lds.update_success")["listener_manager.lds.update_success"] >= 2,
            timeout=10,
            what="LDS",
        )
        assert set(envoy_counters(envoy, "update_rejected").values()) == {0}
        listeners = envoy.config_dump()["configs"]
        dynamic = next(c for c in listeners if c["@type"].endswith("ListenersConfigDump"))["dynamic_listeners"]
        assert [listener["name"] for listener in dynamic] == ["gateway"]
