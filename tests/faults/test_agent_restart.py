"""Static stability: an agent restarted while the server is down serves its gateways from local state.

Server, agent, a real Envoy and two upstreams. The server goes away, the agent is killed (-9) and
restarts on the same ports with the same state, and the gateway answers 200 throughout. When the
server is back on its old address with its old store, the agent reconnects and the gateway follows
the next change.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from meshplane_testing.convergence import assert_converged
from meshplane_testing.envoy import EnvoyProcess, run_envoy
from meshplane_testing.eventually import eventually
from meshplane_testing.faults import api_path, marked_api
from meshplane_testing.gateway import Gateway, from_upstream
from meshplane_testing.meshplane import ServerProcess, run_agent, run_server
from meshplane_testing.process import free_port
from meshplane_testing.upstream import run_upstream

CLUSTER = "edge-restart"


@dataclass
class Poller:
    """Calls the gateway in a loop from a thread; keeps every answer that was not the expected one."""

    gateway: Gateway
    path: str
    upstream: str
    calls: int = 0
    failures: list[str] = field(default_factory=list)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                answer = self.gateway.request("GET", self.path)
                if not from_upstream(self.upstream)(answer):
                    self.failures.append(f"{answer.status_code} {answer.text[:200]}")
            except httpx.TransportError as exc:
                self.failures.append(repr(exc))
            self.calls += 1
            time.sleep(0.02)


@contextlib.contextmanager
def polling(port: int, path: str, upstream: str) -> Iterator[Poller]:
    """A poller of the gateway on `port`, running until the block ends."""
    poller = Poller(Gateway(port), path, upstream)
    stop = threading.Event()
    thread = threading.Thread(target=poller.run, args=(stop,), name="gateway-poller", daemon=True)
    thread.start()
    try:
        yield poller
    finally:
        stop.set()
        thread.join(timeout=10)
        poller.gateway.close()


def envoy_connected(envoy: EnvoyProcess) -> bool:
    """Whether Envoy's ADS stream to the agent is up (its control plane connection gauge)."""
    status, body = envoy.admin("/stats?filter=control_plane.connected_state")
    return status == 200 and "control_plane.connected_state: 1" in body


def put_orders(server: ServerProcess, port: int) -> None:
    with server.http() as http:
        response = http.put(api_path("orders"), json=marked_api("orders", port))
    assert response.status_code in (200, 201), response.text


@pytest.mark.envoy
@pytest.mark.timeout(120)
def test_agent_restarted_while_the_server_is_down_keeps_the_gateway_serving(tmp_path: Path) -> None:
    server_ports = (free_port(), free_port())
    agent_ports = (free_port(), free_port())
    server_grpc = f"127.0.0.1:{server_ports[1]}"
    state_dir = tmp_path / f"agent-{CLUSTER}"
    with contextlib.ExitStack() as stack:
        port_one, _ = stack.enter_context(run_upstream("one"))
        port_two, seen_two = stack.enter_context(run_upstream("two"))
        # Slots for the two processes this test stops and starts again, each on its old ports.
        agent_slot = stack.enter_context(contextlib.ExitStack())
        server_slot = stack.enter_context(contextlib.ExitStack())
        agent = agent_slot.enter_context(run_agent(tmp_path, CLUSTER, server_grpc, ports=agent_ports))
        server = server_slot.enter_context(run_server(tmp_path, ports=server_ports))
        envoy = stack.enter_context(run_envoy(tmp_path, "gw-restart", agent.xds_port))
        gateway = Gateway(agent.gateway_port)
        stack.callback(gateway.close)

        put_orders(server, port_one)
        envoy.wait_listener(agent.gateway_port)
        gateway.wait_for("/orders/anything", from_upstream("one"))
        assert_converged(server, state_dir, CLUSTER, 30)

        server_slot.close()  # the server is down from here on
        with polling(agent.gateway_port, "/orders/anything", "one") as poller:
            agent.process.kill()  # the agent crashes ...
            agent_slot.close()
            stopped_at = poller.calls
            agent = agent_slot.enter_context(run_agent(tmp_path, CLUSTER, server_grpc, ports=agent_ports))
            restarted_at = poller.calls
            # ... and is back with no server to ask: Envoy reconnects and gets the same config, from local state.
            eventually(lambda: envoy_connected(envoy), timeout=30, what="Envoy to reconnect to the restarted agent")
            reconnected_at = poller.calls
            eventually(
                lambda: poller.calls > reconnected_at + 20,
                timeout=10,
                what="calls through the restarted agent's config",
            )
        print(
            f"\ngateway calls: {stopped_at} before the agent stopped, {restarted_at - stopped_at} while it was away, "
            f"{poller.calls - restarted_at} after it came back; {len(poller.failures)} failed"
        )
        assert restarted_at > stopped_at, "no call went through while the agent was away"
        assert not poller.failures, f"{len(poller.failures)} of {poller.calls} calls failed: {poller.failures[:5]}"
        assert gateway.request("GET", "/orders/anything").json()["upstream"] == "one"

        # The server returns on its old address with its old store; the gateway follows the next change.
        server = server_slot.enter_context(run_server(tmp_path, ports=server_ports))
        put_orders(server, port_two)
        answer = gateway.wait_for("/orders/anything", from_upstream("two"), timeout=30)
        assert answer.json()["path"] == "/anything"
        assert_converged(server, state_dir, CLUSTER, 30)
        assert seen_two
