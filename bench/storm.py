"""Storm: N agents holding 200 objects each when the management server is killed (-9) and restarted; how long
until every agent is in sync again, what it costs the server, and whether anything is sent twice.

N sync clients, each the project's own delta ADS client (meshplane.xds.client.DeltaClient, as the agent
builds it), run in a few worker processes over several channels; each is registered as its own cluster
with one server (SQLite, plaintext sync) that gives every cluster 200 APIs. A client keeps what it holds
per type URL (name -> resource) and, like the agent, tells every new stream what it has
(initial_resource_versions). Once all hold the 200 APIs and the server is quiet, the server is killed
with SIGKILL and started again at once on the same ports and data; every client reconnects on its own
(gRPC's and DeltaClient's backoffs, as in the agent). A client is back in sync when the first API
response of a stream after the restart has reached it and it holds exactly the names and versions it
held before. Times are from the new server's launch to each client's sync (time.time() in every
process: one machine, one clock); the server's CPU (from /proc, in 10 ms ticks) is counted from its
launch until all are in sync and until it is quiet again. What the server sent after the restart is
what the clients received on their new streams: each response rebuilt from the update (resources,
removed names, type URL and nonce) and measured with ByteSize, before any gRPC compression; an upsert
of a name at the version the client already held is an object resent. Prints one JSON object; exits 1
if a worker fails or a wait times out.

    .venv/bin/python -m bench.storm [--agents 1000] [--objects 200] [--workers 4] [--quick]
"""

from __future__ import annotations

import contextlib
import logging
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import discovery_pb2

from bench.common import cpu_seconds, distribution, emit, parser, raise_fd_limit, wait_quiet
from bench.fleet import STREAMS_PER_CHANNEL, Report, Tally, WorkerPlan, Workers, plans, put_api
from meshplane.model.registry import REGISTRY
from meshplane.xds.client import DeltaClient, DeltaUpdate
from meshplane_testing.meshplane import run_server
from meshplane_testing.process import free_port

API_TYPE = REGISTRY.get("API").type_url
TYPE_URLS = [info.type_url for info in REGISTRY.delivered()]
CLUSTERS = "storm"
"""Clients are clusters storm-0, storm-1, ..."""
SERVER = "server-storm"
QUIET_TIMEOUT = 300.0
DRAIN = 1.0
"""Seconds without a report, once the server is quiet, after which every client has told what it received."""
TARGETS = {"all_in_sync_s": 10.0, "objects_resent": 0}


class Holder:
    """One client's copy of what the server sent it, per type URL, and what reached it after the restart."""

    def __init__(self, cluster: str, plan: WorkerPlan, tally: Tally) -> None:
        self._cluster = cluster
        self._expected = plan.expected
        self._tally = tally
        self._held: dict[str, dict[str, discovery_pb2.Resource]] = {url: {} for url in TYPE_URLS}
        self._streams = 0
        # The stream on which all APIs had arrived (later ones are after the restart), and the API versions
        # held then: what the client must hold again after the restart.
        self._ready_on = 0
        self._before: dict[str, str] | None = None
        self._attempts: list[float] = []
        self._synced = False

    def versions(self, type_url: str) -> dict[str, str]:
        """What the client holds of a type, as it tells a new stream (initial_resource_versions)."""
        if type_url == TYPE_URLS[0] and self._before is not None:
            self._attempts.append(time.time())  # DeltaClient asks for the first type first on each attempt
        return {name: resource.version for name, resource in self._held[type_url].items()}

    async def connected(self) -> None:
        self._streams += 1

    async def update(self, update: DeltaUpdate) -> None:
        at = time.time()
        held = self._held[update.type_url]
        restarted = self._before is not None and self._streams > self._ready_on
        if restarted:
            resent = sum(1 for r in update.upserts if r.name in held and held[r.name].version == r.version)
            response = discovery_pb2.DeltaDiscoveryResponse(
                type_url=update.type_url,
                resources=update.upserts,
                removed_resources=update.removed,
                nonce=update.nonce,
            )
            self._tally.send("traffic", response.ByteSize(), resent, len(update.upserts) - resent, len(update.removed))
        held.update((resource.name, resource) for resource in update.upserts)
        for name in update.removed:
            held.pop(name, None)
        if update.type_url != API_TYPE:
            return
        versions = {name: resource.version for name, resource in held.items()}
        if self._before is None:
            if len(versions) >= self._expected:
                self._before, self._ready_on = versions, self._streams
                self._tally.ready(self._cluster)
        elif restarted and not self._synced and versions == self._before:
            self._synced = True
            self._tally.send("synced", self._cluster, at, tuple(self._attempts))


async def storm_client(cluster: str, shared: grpc.aio.Channel, plan: WorkerPlan, tally: Tally) -> None:
    """Hold one delta ADS stream as `cluster` like an agent, resuming from what it holds on every new stream."""
    # The server is down on purpose: a refused stream is expected, not worth a warning per attempt.
    logging.getLogger("meshplane.xds.client").setLevel(logging.ERROR)
    holder = Holder(cluster, plan, tally)
    client = DeltaClient(
        lambda: shared,
        base_pb2.Node(id=cluster, cluster=cluster),
        TYPE_URLS,
        initial_versions=holder.versions,
        on_update=holder.update,
        on_connected=holder.connected,
    )
    await client.run()


class Aftermath:
    """The clients' reports after the restart: when each was in sync (and its attempts), and what they got."""

    def __init__(self, launched: float) -> None:
        self._launched = launched
        self.synced: dict[str, tuple[float, Sequence[float]]] = {}
        self.responses = self.size = self.resent = self.changed = self.removed = 0

    def take(self, report: Report) -> None:
        if report[0] == "synced":
            _, _, cluster, at, attempts = report
            if at < self._launched:
                raise RuntimeError(f"{cluster} lost its stream and resynced before the server was killed")
            self.synced[cluster] = (at, attempts)
        elif report[0] == "traffic":
            _, _, size, resent, changed, removed = report
            self.responses += 1
            self.size += size
            self.resent += resent
            self.changed += changed
            self.removed += removed
        else:
            raise RuntimeError(f"unexpected report after the restart: {report!r}")

    def figures(self, ready_at: float) -> dict[str, Any]:
        """Times from the launch: each client in sync, and its last stream attempt (the one that synced)."""
        in_sync = [at - self._launched for at, _ in self.synced.values()]
        attempts = [attempts for _, attempts in self.synced.values()]
        return {
            "all_in_sync_s": round(max(in_sync), 2),
            "in_sync_s": distribution(in_sync),
            "last_attempt_s": distribution([a[-1] - self._launched for a in attempts if a]),
            "attempts_per_agent": distribution([len(a) for a in attempts], 0),
            # Streams refused (or not yet connectable) while the new server already answered /readyz.
            "agents_retrying_after_ready": sum(1 for a in attempts if sum(t >= ready_at for t in a) > 1),
        }


def storm(work: Path, agents: int, workers: int, objects: int) -> dict[str, Any]:
    ports = (free_port(), free_port())
    with contextlib.ExitStack() as stack:
        first = stack.enter_context(run_server(work, name=SERVER, ports=ports, insecure=True))
        with first.http(timeout=60) as api:
            for index in range(objects):
                put_api(api, f"o{index}", f"/o{index}")
        wait_quiet(first.process.pid, QUIET_TIMEOUT)
        started = time.monotonic()
        fleet = plans(first.grpc_address, CLUSTERS, agents, workers, storm_client, expected=objects)
        pool = stack.enter_context(Workers(fleet))
        pool.wait_ready(timeout=60 + agents * 0.5)
        initial_sync = time.monotonic() - started
        wait_quiet(first.process.pid, QUIET_TIMEOUT)

        first.process.kill()
        launched = time.time()
        server = stack.enter_context(run_server(work, name=SERVER, ports=ports, insecure=True))
        ready_at = time.time()
        pid = server.process.pid
        cpu_ready = cpu_seconds(pid)
        aftermath = Aftermath(launched)
        deadline = time.monotonic() + 60 + agents * 0.1
        while len(aftermath.synced) < agents:
            aftermath.take(pool.next(deadline))
        cpu_in_sync = cpu_seconds(pid)
        quiet = wait_quiet(pid, QUIET_TIMEOUT)
        cpu_quiet = cpu_seconds(pid)
        with contextlib.suppress(TimeoutError):
            while True:
                aftermath.take(pool.next(time.monotonic() + DRAIN))
        if not server.process.alive():
            raise RuntimeError(f"the restarted server died:\n{server.process.log()[-4000:]}")
    restart = {"server_ready_s": round(ready_at - launched, 2), **aftermath.figures(ready_at)}
    restart["busy_after_all_in_sync_s"] = round(quiet, 1)
    return {
        "benchmark": "storm",
        "agents": agents,
        "apis_per_agent": objects,
        "workers": workers,
        "streams_per_channel": STREAMS_PER_CHANNEL,
        "register_and_initial_sync_s": round(initial_sync, 1),
        "restart": restart,
        "server_cpu_s": {
            "until_ready": round(cpu_ready, 2),
            "until_in_sync": round(cpu_in_sync, 2),
            "until_quiet": round(cpu_quiet, 2),
        },
        "responses_after_restart": aftermath.responses,
        "bytes_sent_after_restart": aftermath.size,
        "objects_resent": aftermath.resent,
        "objects_changed": aftermath.changed,
        "objects_removed": aftermath.removed,
        "targets": TARGETS,
        "met": {
            "all_in_sync_s": restart["all_in_sync_s"] <= TARGETS["all_in_sync_s"],
            "objects_resent": aftermath.resent <= TARGETS["objects_resent"],
        },
    }


def main() -> None:
    arguments = parser(__doc__, "50 agents x 20 objects: proves the benchmark runs")
    arguments.add_argument("--agents", type=int, default=1000)
    arguments.add_argument("--objects", type=int, default=200, help="APIs every agent holds")
    arguments.add_argument("--workers", type=int, default=4, help="processes holding the clients")
    args = arguments.parse_args()
    started = time.monotonic()
    agents, objects = (50, 20) if args.quick else (args.agents, args.objects)
    raise_fd_limit()
    try:
        with tempfile.TemporaryDirectory(prefix="meshplane-bench-") as work:
            report = storm(Path(work), agents, args.workers, objects)
    except (RuntimeError, TimeoutError) as exc:
        sys.exit(f"storm failed: {exc}")
    emit(report, started)


if __name__ == "__main__":
    main()
