"""Run meshplane's own processes in tests: a server and agents, on free ports, always stopped."""

from __future__ import annotations

import contextlib
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.harness.process import Process, free_port, port_open, running

MESHPLANE = [sys.executable, "-m", "meshplane"]


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@dataclass
class ServerProcess:
    process: Process
    http_port: int
    grpc_port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"


@dataclass
class AgentProcess:
    process: Process
    cluster: str
    xds_port: int
    gateway_port: int


def server_argv(data_dir: Path, http_port: int, grpc_port: int, database_url: str | None = None) -> list[str]:
    argv = [
        *MESHPLANE,
        "server",
        "--data-dir",
        str(data_dir),
        "--http-address",
        f"127.0.0.1:{http_port}",
        "--grpc-address",
        f"127.0.0.1:{grpc_port}",
    ]
    return argv + (["--database-url", database_url] if database_url else [])


@contextlib.contextmanager
def run_server(
    tmp_path: Path, database_url: str | None = None, name: str = "server", ports: tuple[int, int] | None = None
) -> Iterator[ServerProcess]:
    """A management server; `ports` (http, grpc) lets a test restart it where agents expect it."""
    http_port, grpc_port = ports or (free_port(), free_port())
    argv = server_argv(tmp_path / name, http_port, grpc_port, database_url)
    with running(argv, tmp_path / f"{name}.log") as process:
        server = ServerProcess(process, http_port, grpc_port)
        process.wait_ready(lambda: _http_ok(f"{server.url}/readyz"), 30.0, "the server to be ready")
        yield server


@contextlib.contextmanager
def run_agent(
    tmp_path: Path, cluster: str, server_grpc: str, labels: dict[str, str] | None = None
) -> Iterator[AgentProcess]:
    """An agent for `cluster`, its state under tmp_path/agent-<cluster> (kept across restarts)."""
    xds_port, gateway_port = free_port(), free_port()
    argv = [
        *MESHPLANE,
        "agent",
        "--cluster",
        cluster,
        "--server",
        server_grpc,
        "--state-dir",
        str(tmp_path / f"agent-{cluster}"),
        "--xds-address",
        f"127.0.0.1:{xds_port}",
        "--gateway-address",
        f"127.0.0.1:{gateway_port}",
    ]
    for key, value in (labels or {}).items():
        argv += ["--label", f"{key}={value}"]
    with running(argv, tmp_path / f"agent-{cluster}.log") as process:
        process.wait_ready(lambda: port_open(xds_port), 30.0, "the agent's xDS port")
        yield AgentProcess(process, cluster, xds_port, gateway_port)
