"""A broken link between agent and server: cut, silently stalled, or slow. The agent always converges.

A TCP proxy sits between the agent and the server's sync port; the server's REST API is reached
directly, so writes go on while the link is broken.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from meshplane_testing.convergence import agent_apis, assert_converged
from meshplane_testing.eventually import eventually
from meshplane_testing.faults import Write, Writers
from meshplane_testing.meshplane import AgentProcess, ServerProcess, run_agent, run_server
from meshplane_testing.tcp_proxy import TcpProxy, run_tcp_proxy

CLUSTER = "edge-link"
# A short keepalive window for the server (seconds of silence before a ping, seconds to wait for its answer),
# and how long it may take to notice a silent dead link: the window, plus a margin for the status write.
KEEPALIVE_INTERVAL = 2.0
KEEPALIVE_TIMEOUT = 2.0
DETECTION_BOUND = KEEPALIVE_INTERVAL + KEEPALIVE_TIMEOUT + 6.0
SYNC_PUSHES = re.compile(r'^meshplane_xds_pushes_total\{[^}]*server="sync"[^}]*\} (\S+)$', re.MULTILINE)


@dataclass
class ProxiedSetup:
    server: ServerProcess
    proxy: TcpProxy
    agent: AgentProcess
    state_dir: Path

    def converged(self, timeout: float = 30.0) -> float:
        return assert_converged(self.server, self.state_dir, CLUSTER, timeout)


@contextlib.contextmanager
def proxied(tmp_path: Path, delay: float = 0.0) -> Iterator[ProxiedSetup]:
    """A server, a proxy in front of its sync port, and an agent that reaches the server only through it."""
    with (
        run_server(tmp_path) as server,
        run_tcp_proxy(server.grpc_port) as proxy,
    ):
        proxy.set_delay(delay)
        with run_agent(tmp_path, CLUSTER, proxy.address, {"region": "eu"}) as agent:
            yield ProxiedSetup(server, proxy, agent, tmp_path / f"agent-{CLUSTER}")


def puts(names: list[str], port: int) -> list[Write]:
    return [Write("PUT", name, port=port) for name in names]


def sync_pushes(server_url: str) -> float:
    """Responses the server's sync service has sent so far, from its metrics."""
    text = httpx.get(f"{server_url}/metrics", timeout=5).text
    return sum(float(value) for value in SYNC_PUSHES.findall(text))


def cluster_connected(server: ServerProcess) -> bool | None:
    response = httpx.get(f"{server.url}/v1/clusters/{CLUSTER}", headers=server.headers, timeout=5)
    if response.status_code == 404:
        return None
    return bool(response.json().get("status", {}).get("connected"))


def test_agent_converges_after_the_link_is_cut_again_and_again(tmp_path: Path) -> None:
    with proxied(tmp_path) as setup, Writers(setup.server) as writers:
        writers.run(puts([f"api-{i}" for i in range(10)], 9001))
        setup.converged()

        # Five cuts, each followed at once by writes the agent has to catch up with after reconnecting.
        for cut in range(5):
            setup.proxy.cut()
            writers.run(
                [
                    *puts([f"api-{i}" for i in range(cut, 10, 2)], 9100 + cut),
                    Write("DELETE", f"api-{cut * 2 + 1}"),
                    *puts([f"new-{cut}"], 9200 + cut),
                ]
            )

        took = setup.converged()
        assert setup.proxy.connections >= 2, "the agent never reconnected through the proxy"
        print(f"\nconverged {took:.2f}s after the last cut; {setup.proxy.connections} connections")


def test_agent_converges_after_a_silent_stall_is_resumed(tmp_path: Path) -> None:
    with proxied(tmp_path) as setup, Writers(setup.server) as writers:
        writers.run(puts([f"api-{i}" for i in range(10)], 9001))
        setup.converged()

        setup.proxy.stall()
        downstream = setup.proxy.bytes_downstream
        pushes = sync_pushes(setup.server.url)
        writers.run([*puts([f"api-{i}" for i in range(5)], 9002), Write("DELETE", "api-9"), *puts(["late"], 9003)])
        # The server has pushed the change into the dead link, and none of it came through.
        eventually(
            lambda: sync_pushes(setup.server.url) > pushes, timeout=10, what="the server to push into the stalled link"
        )
        assert setup.proxy.bytes_downstream == downstream
        assert "default/late" not in agent_apis(setup.state_dir)

        setup.proxy.resume()
        took = setup.converged()
        print(f"\nconverged {took:.2f}s after resume; {setup.proxy.connections} connection(s)")


def test_agent_converges_over_a_link_with_200ms_latency(tmp_path: Path) -> None:
    with proxied(tmp_path, delay=0.2) as setup, Writers(setup.server) as writers:
        writers.run(puts([f"api-{i}" for i in range(10)], 9001))
        first = setup.converged()
        writers.run([*puts([f"api-{i}" for i in range(0, 10, 2)], 9002), Write("DELETE", "api-1")])
        second = setup.converged()
        assert setup.proxy.bytes_downstream > 0
        print(f"\nover 200 ms each way: converged in {first:.2f}s, then {second:.2f}s")


def test_stalled_link_is_detected_as_disconnected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MESHPLANE_KEEPALIVE_INTERVAL", str(KEEPALIVE_INTERVAL))
    monkeypatch.setenv("MESHPLANE_KEEPALIVE_TIMEOUT", str(KEEPALIVE_TIMEOUT))
    with proxied(tmp_path) as setup:
        eventually(lambda: cluster_connected(setup.server) is True, timeout=30, what="the cluster to show as connected")

        setup.proxy.stall()
        stalled_at = time.monotonic()
        eventually(
            lambda: cluster_connected(setup.server) is False, timeout=DETECTION_BOUND, what="the server to notice"
        )
        print(f"\nstalled link detected as disconnected after {time.monotonic() - stalled_at:.1f}s")
