"""What the fault tests (tests/faults) and the fault benchmarks (bench/kill_rounds.py, bench/catchup.py) share.

The API documents they write, concurrent writers that record which writes the server acknowledged, the kill -9
round, and a way to restart an agent where its Envoys and its gateway port expect it.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from meshplane.model.wire import integral
from meshplane_testing.convergence import assert_converged, store_apis
from meshplane_testing.documents import api, backend
from meshplane_testing.meshplane import ServerProcess, run_agent, run_server
from meshplane_testing.process import free_port

PROJECT = "default"


def marked_api(name: str, port: int) -> dict[str, Any]:
    """An API served under /<name>; the backend port doubles as a marker of which write this is."""
    return api(name, backends=[backend(port, timeout="5s")])


def api_path(name: str, project: str = PROJECT) -> str:
    return f"/v1/projects/{project}/apis/{name}"


@dataclass
class Write:
    """One PUT or DELETE and what came of it: an HTTP status, or None if no answer came (a crash)."""

    op: str
    name: str
    port: int = 0
    status: int | None = None

    @property
    def acknowledged(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


class Writers:
    """A pool of threads, each with its own keep-alive client, sending writes concurrently."""

    def __init__(self, server: ServerProcess, workers: int = 8, timeout: float = 10.0):
        self.server = server
        self.timeout = timeout
        self._local = threading.local()
        self._clients: list[httpx.Client] = []
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="writer")

    def __enter__(self) -> Writers:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        for client in self._clients:
            client.close()

    def _client(self) -> httpx.Client:
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = self.server.http(self.timeout)
            with self._lock:
                self._clients.append(client)
        return client

    def _send(self, write: Write) -> Write:
        try:
            if write.op == "PUT":
                response = self._client().put(api_path(write.name), json=marked_api(write.name, write.port))
            else:
                response = self._client().delete(api_path(write.name))
            write.status = response.status_code
        except httpx.TransportError:
            write.status = None  # the server died with this write in flight, or before it was sent
        return write

    def submit(self, writes: Sequence[Write]) -> list[Future[Write]]:
        return [self._pool.submit(self._send, write) for write in writes]

    def run(self, writes: Sequence[Write]) -> list[Write]:
        """Send all, wait for all; the writes come back with their statuses."""
        return [future.result() for future in self.submit(writes)]


def applied_updates(log: str, type_name: str = "API") -> list[dict[str, Any]]:
    """The agent's "update applied" log records for one type, in order: one per update it took."""
    records = []
    for line in log.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("message") == "update applied" and record.get("type") == type_name:
            records.append(record)
    return records


def projection_matches_store(server: ServerProcess, cluster: str) -> bool:
    """The server's projection for `cluster` (`/v1/clusters/{name}/resources`) equals what the store places there."""
    with server.http() as http:
        response = http.get(f"/v1/clusters/{cluster}/resources")
    response.raise_for_status()
    items = [item for item in response.json()["items"] if item["typeUrl"].endswith(".API")]
    projected = {item["name"]: integral(item["object"]["spec"]) for item in items}
    return projected == store_apis(server, cluster)


def unexpected(writes: Sequence[Write], server: ServerProcess) -> list[str]:
    """Acknowledged writes the store does not show: a PUT's spec (by its port marker) or a DELETE's absence.

    Each name is written at most once per batch, so an acknowledged write must be what the store holds.
    """
    problems = []
    with server.http() as http:
        for write in writes:
            if not write.acknowledged:
                continue
            response = http.get(api_path(write.name))
            if write.op == "DELETE" and response.status_code != 404:
                problems.append(f"DELETE {write.name} was acknowledged, but GET answers {response.status_code}")
            elif write.op == "PUT":
                if response.status_code != 200:
                    problems.append(f"PUT {write.name} was acknowledged, but GET answers {response.status_code}")
                elif (port := response.json()["spec"]["backends"][0]["port"]) != write.port:
                    problems.append(f"PUT {write.name} (port {write.port}) was acknowledged, the store has {port}")
    return problems


def stored_names(server: ServerProcess) -> set[str]:
    with server.http() as http:
        response = http.get(f"/v1/projects/{PROJECT}/apis", params={"limit": 1000})
        response.raise_for_status()
        return {item["metadata"]["name"] for item in response.json()["items"]}


def plan_burst(present: set[str], round_no: int, size: int, rng: random.Random) -> list[Write]:
    """`size` writes on distinct names: about a third delete existing APIs, the rest update or create."""
    deletes = rng.sample(sorted(present), min(len(present), size // 3))
    updates = rng.sample(sorted(present - set(deletes)), min(len(present) - len(deletes), size // 3))
    creates = [f"r{round_no}-{i}" for i in range(size - len(deletes) - len(updates))]
    writes = [Write("DELETE", name) for name in deletes]
    writes += [Write("PUT", name, port=20_000 + round_no * 100 + i) for i, name in enumerate(updates + creates)]
    rng.shuffle(writes)
    return writes


@dataclass
class KillRound:
    """One round: a burst, kill -9 of the server mid-burst, a restart, and the agent converging."""

    round_no: int
    acknowledged: int
    unanswered: int
    restart_s: float
    converge_s: float
    """From the restarted server being ready to the agent holding exactly the store's projection."""
    lost: list[str] = field(default_factory=list)


def kill_rounds(
    tmp_path: Path,
    rounds: int,
    *,
    database_url: str | None = None,
    burst: int = 20,
    seed: int = 1,
    converge_timeout: float = 30.0,
) -> list[KillRound]:
    """Run the rounds against one agent; the server always restarts on the same ports with the same store.

    Each round: a burst of `burst` concurrent writes, kill -9 of the server once a third of them have
    been answered, a restart, then the checks: every acknowledged write is in the store, and the
    agent converges.
    """
    ports = (free_port(), free_port())
    rng = random.Random(seed)
    cluster = "edge-kill"
    state_dir = tmp_path / f"agent-{cluster}"
    results: list[KillRound] = []
    last: list[Write] = []
    killed_at = 0.0
    # The agent comes up first and keeps retrying until a server answers at the fixed address.
    with run_agent(tmp_path, cluster, f"127.0.0.1:{ports[1]}", {"region": "eu"}):
        for round_no in range(rounds + 1):
            with run_server(tmp_path, database_url, ports=ports) as server:
                if round_no == 0:
                    with Writers(server) as writers:
                        writers.run([Write("PUT", f"seed-{i}", port=10_000 + i) for i in range(burst)])
                    assert_converged(server, state_dir, cluster, converge_timeout)
                else:
                    ready_at = time.monotonic()
                    lost = unexpected(last, server)
                    converge_s = assert_converged(server, state_dir, cluster, converge_timeout)
                    results.append(
                        KillRound(
                            round_no - 1,
                            acknowledged=sum(w.acknowledged for w in last),
                            unanswered=sum(w.status is None for w in last),
                            restart_s=ready_at - killed_at,
                            converge_s=converge_s,
                            lost=lost,
                        )
                    )
                if round_no == rounds:
                    break
                last = plan_burst(stored_names(server), round_no, burst, rng)
                with Writers(server) as writers:
                    futures = writers.submit(last)
                    _wait_for_some(futures, len(futures) // 3)
                    server.process.kill()
                    killed_at = time.monotonic()
                    for future in futures:
                        future.result()
    return results


def _wait_for_some(futures: Sequence[Future[Write]], count: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while sum(f.done() for f in futures) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {count} writes answered within {timeout}s")
        time.sleep(0.001)
