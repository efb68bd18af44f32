"""Fan-out: how long an API change takes to reach the LAST of N agents, and the server memory each agent costs.

N sync clients, each the project's own delta ADS client (meshplane.xds.client.DeltaClient, as the agent
builds it) keeping what it receives in memory (with `--report-status`, also reporting each object it
applies, as the agent does), run in a few worker processes over several channels; each is registered as its own cluster
with one server (SQLite, plaintext sync). Every cluster is given 200 APIs plus one more, which is then
changed 20 times, each once the server is quiet again; a change is timed from just before its PUT until
the last client has received it (time.time() in every process: one machine, one clock). Server RSS is
read with the objects written and no client (RSS_0), then with all N clients holding them and the server
quiet (RSS_N): per agent = (RSS_N - RSS_0) / N. Server CPU comes from /proc in clock ticks (10 ms), per
change from its PUT until the server is quiet again, less what the quiet server spends in as long. The
floor, in the same run: a bare grpc.aio server broadcasting as many bytes as one such change (a
unary-stream call per client, generic handlers, bytes in and out) to N clients in the same worker layout,
timed to the last receiver the same way. Prints one JSON object.

    .venv/bin/python -m bench.fanout [--agents 100 500 1000] [--changes 20] [--workers 4] [--quick]
"""

from __future__ import annotations

import asyncio
import functools
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import discovery_pb2

from bench.common import (
    PROJECT,
    cpu_seconds,
    distribution,
    emit,
    parser,
    raise_fd_limit,
    ratio,
    rss_bytes,
    wait_quiet,
)
from bench.fleet import STREAMS_PER_CHANNEL, Tally, WorkerPlan, Workers, plans, put_api
from meshplane.model.manifests import MANIFEST_TYPE
from meshplane.model.registry import REGISTRY
from meshplane.proto.v1 import control_plane_pb2, control_plane_pb2_grpc
from meshplane.xds.client import DeltaClient, DeltaUpdate
from meshplane_testing.meshplane import run_server

API_TYPE = REGISTRY.get("API").type_url
WATCHED = "fanout"
WATCHED_NAME = f"{PROJECT}/{WATCHED}"
CLUSTERS = "fan"
"""Clients are clusters fan-0, fan-1, ..."""
FLOOR_METHOD = "/meshplane.bench.Fanout/Subscribe"
PAUSE = 0.5
"""Seconds between the floor's changes; meshplane's wait until the server is quiet again (wait_quiet)."""
QUIET_TIMEOUT = 300.0
IDLE = 2.0
"""Seconds over which the CPU of a quiet server with its agents connected is measured."""
CHANGE_TIMEOUT = 120.0
TARGETS = {"ratio_p99": 2.0, "ratio_cpu_per_change": 2.0, "bytes_per_agent": 100 * 1024}
"""At every fleet size: p99 to the last agent and server CPU per change, each against the floor's; at the
largest, the server memory per agent (a small fleet's figure is mostly the server's fixed cost)."""


class StatusReports:
    """What an agent reports after applying an update: each changed object APPLIED at its version, sent in
    order on a unary call beside the stream (kept in memory here; the agent keeps them on disk)."""

    def __init__(self, cluster: str, shared: grpc.aio.Channel) -> None:
        self._cluster = cluster
        self._stub = control_plane_pb2_grpc.ControlPlaneStub(shared)
        self._pending: list[control_plane_pb2.ObjectDelivery] = []
        self._wake = asyncio.Event()
        self._sent = 0

    def applied(self, update: DeltaUpdate) -> None:
        if update.type_url == MANIFEST_TYPE:  # the agent reports those once Kubernetes has them; there is none
            return
        self._pending.extend(
            control_plane_pb2.ObjectDelivery(
                type_url=update.type_url, name=r.name, version=r.version, state=control_plane_pb2.APPLIED
            )
            for r in update.upserts
        )
        self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            deliveries, self._pending = self._pending, []
            if deliveries:
                self._sent += 1
                request = control_plane_pb2.ReportStatusRequest(
                    cluster=self._cluster, deliveries=deliveries, idempotency_key=f"{self._cluster}/bench/{self._sent}"
                )
                await self._stub.ReportStatus(request, timeout=60)


async def sync_client(cluster: str, shared: grpc.aio.Channel, plan: WorkerPlan, tally: Tally, *, report: bool) -> None:
    """Hold one delta ADS stream as `cluster` like an agent (reporting what it applies with `report`); time
    the watched API."""
    held: set[str] = set()
    last_version = ""
    reports = StatusReports(cluster, shared)

    async def on_update(update: DeltaUpdate) -> None:
        nonlocal last_version
        at = time.time()
        if report:
            reports.applied(update)
        if update.type_url != API_TYPE:
            return
        for resource in update.upserts:
            held.add(resource.name)
            if resource.name == WATCHED_NAME and resource.version != last_version:
                last_version = resource.version
                response = discovery_pb2.DeltaDiscoveryResponse(
                    type_url=update.type_url, resources=[resource], nonce=update.nonce
                )
                tally.got(resource.version, at, response.ByteSize())
        held.difference_update(update.removed)
        if len(held) >= plan.expected:
            tally.ready(cluster)

    client = DeltaClient(
        lambda: shared,
        base_pb2.Node(id=cluster, cluster=cluster),
        [info.type_url for info in REGISTRY.delivered()],
        initial_versions=lambda type_url: {},
        on_update=on_update,
    )
    await asyncio.gather(client.run(), reports.run())


async def subscriber(cluster: str, shared: grpc.aio.Channel, plan: WorkerPlan, tally: Tally) -> None:
    """One floor receiver: a unary-stream call, bytes out, each message starting with its change number."""
    async for message in shared.unary_stream(FLOOR_METHOD)(b""):
        tally.got(int.from_bytes(message[:4], "big"), time.time(), len(message))


def through_meshplane(
    work: Path, agents: int, workers: int, objects: int, changes: int, report: bool
) -> dict[str, Any]:
    with run_server(work, name=f"server-{agents}", insecure=True) as server, server.http(timeout=60) as api:
        pid = server.process.pid
        for index in range(objects):
            put_api(api, f"o{index}", f"/o{index}")
        put_api(api, WATCHED, f"/{WATCHED}", "/start")
        wait_quiet(pid, QUIET_TIMEOUT)
        rss_0 = rss_bytes(pid)
        started = time.monotonic()
        client = functools.partial(sync_client, report=report)
        fleet = plans(server.grpc_address, CLUSTERS, agents, workers, client, expected=objects + 1)
        with Workers(fleet) as pool:
            pool.wait_ready(timeout=60 + agents * 0.5)
            initial_sync = time.monotonic() - started
            settled = wait_quiet(pid, QUIET_TIMEOUT)
            idle_cpu = cpu_seconds(pid)
            time.sleep(IDLE)
            idle_cpu = cpu_seconds(pid) - idle_cpu
            rss_n = rss_bytes(pid)
            timings, cpu, net = [], [], []
            for change in range(changes):
                used, at, began = cpu_seconds(pid), time.time(), time.monotonic()
                put_api(api, WATCHED, f"/{WATCHED}", f"/c{change}")
                timings.append((pool.wait_last(CHANGE_TIMEOUT) - at) * 1000)
                wait_quiet(pid, QUIET_TIMEOUT)
                cpu.append((cpu_seconds(pid) - used) * 1000)
                net.append(cpu[-1] - idle_cpu / IDLE * (time.monotonic() - began) * 1000)
            size = pool.size
        if not server.process.alive():
            raise RuntimeError(f"the server died:\n{server.process.log()[-4000:]}")
    return {
        "to_last_agent_ms": distribution(timings),
        "register_and_initial_sync_s": round(initial_sync, 1),
        "busy_after_initial_sync_s": round(settled, 1),
        "server_rss_mb": {"no_agents": round(rss_0 / 2**20, 1), "agents_idle": round(rss_n / 2**20, 1)},
        "bytes_per_agent": round((rss_n - rss_0) / agents),
        # Against to_last_agent_ms: a change's whole cost to the server, delivery and aftermath (until quiet).
        "server_cpu_ms_per_change": distribution(cpu, 0),
        # Less what the server spends anyway over the same time (the quiet it is waited into included).
        "server_cpu_ms_per_change_mean": round(sum(net) / len(net), 1),
        "server_idle_cpu_ms_per_s": round(idle_cpu / IDLE * 1000),
        "change_bytes": size,
    }


class Broadcaster:
    """The floor's whole server: every subscriber gets every message, in order, as the same bytes."""

    def __init__(self) -> None:
        self.queues: list[asyncio.Queue[bytes]] = []
        self._joined = asyncio.Event()

    async def subscribe(self, request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        mailbox: asyncio.Queue[bytes] = asyncio.Queue()
        self.queues.append(mailbox)
        self._joined.set()
        try:
            while True:
                yield await mailbox.get()
        finally:
            self.queues.remove(mailbox)

    async def wait_for(self, subscribers: int) -> None:
        while len(self.queues) < subscribers:
            self._joined.clear()
            await self._joined.wait()

    def send(self, message: bytes) -> None:
        for mailbox in self.queues:
            mailbox.put_nowait(message)


async def floor(agents: int, workers: int, changes: int, size: int) -> dict[str, Any]:
    broadcaster = Broadcaster()
    server = grpc.aio.server()
    service, method = FLOOR_METHOD.strip("/").split("/")
    handler = grpc.unary_stream_rpc_method_handler(broadcaster.subscribe)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, {method: handler}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        receivers = plans(f"127.0.0.1:{port}", CLUSTERS, agents, workers, subscriber, register=False)
        with Workers(receivers) as pool:
            async with asyncio.timeout(60 + agents * 0.1):
                await broadcaster.wait_for(agents)
            timings, cpu = [], []
            for change in range(changes):
                used, at = cpu_seconds(os.getpid()), time.time()
                broadcaster.send(change.to_bytes(4, "big") + bytes(max(0, size - 4)))
                timings.append((await asyncio.to_thread(pool.wait_last, CHANGE_TIMEOUT) - at) * 1000)
                cpu.append((cpu_seconds(os.getpid()) - used) * 1000)
                await asyncio.sleep(PAUSE)
    finally:
        await server.stop(None)
    return {
        "to_last_receiver_ms": distribution(timings),
        "server_cpu_ms_per_change": distribution(cpu, 0),
        "server_cpu_ms_per_change_mean": round(sum(cpu) / len(cpu), 1),
    }


def run(agent_counts: list[int], workers: int, objects: int, changes: int, report: bool) -> dict[str, Any]:
    raise_fd_limit()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="meshplane-bench-") as work:
        for agents in agent_counts:
            measured = through_meshplane(Path(work), agents, workers, objects, changes, report)
            measured["floor"] = asyncio.run(floor(agents, workers, changes, measured["change_bytes"]))
            measured["ratio_p99_to_floor"] = ratio(
                measured["to_last_agent_ms"]["p99"], measured["floor"]["to_last_receiver_ms"]["p99"]
            )
            # Means: a change's CPU is counted in 10 ms ticks, which a small fleet's floor may not reach at all.
            measured["ratio_cpu_per_change_to_floor"] = ratio(
                measured["server_cpu_ms_per_change_mean"], measured["floor"]["server_cpu_ms_per_change_mean"]
            )
            measured["met"] = met(measured, largest=agents == max(agent_counts))
            results[str(agents)] = measured
    return {
        "benchmark": "fanout",
        "changes": changes,
        "apis_per_agent": objects + 1,
        "workers": workers,
        "streams_per_channel": STREAMS_PER_CHANNEL,
        "clients_report_status": report,
        "results": results,
        "targets": TARGETS,
        "met": all(all(measured["met"].values()) for measured in results.values()),
    }


def met(measured: dict[str, Any], *, largest: bool) -> dict[str, bool]:
    """Each target at one fleet size; a ratio without a floor to divide by (no CPU tick) is not met."""
    p99, cpu = measured["ratio_p99_to_floor"], measured["ratio_cpu_per_change_to_floor"]
    judged = {
        "ratio_p99": p99 is not None and p99 <= TARGETS["ratio_p99"],
        "ratio_cpu_per_change": cpu is not None and cpu <= TARGETS["ratio_cpu_per_change"],
    }
    if largest:
        judged["bytes_per_agent"] = measured["bytes_per_agent"] <= TARGETS["bytes_per_agent"]
    return judged


def main() -> None:
    arguments = parser(__doc__, "50 agents, 5 changes: proves the benchmark runs")
    arguments.add_argument("--agents", type=int, nargs="+", default=[100, 500, 1000])
    arguments.add_argument("--changes", type=int, default=20)
    arguments.add_argument("--objects", type=int, default=200, help="APIs every agent holds besides the changed one")
    arguments.add_argument("--workers", type=int, default=4, help="processes holding the clients")
    arguments.add_argument(
        "--report-status",
        action="store_true",
        help="clients report each object they apply (ReportStatus), as agents do; without it the server counts "
        "every object as not yet applied at every cluster",
    )
    args = arguments.parse_args()
    started = time.monotonic()
    agents, changes = ([50], 5) if args.quick else (args.agents, args.changes)
    emit(run(agents, args.workers, args.objects, changes, args.report_status), started)


if __name__ == "__main__":
    main()
