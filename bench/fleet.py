"""Many simulated agents for the benchmarks: clients spread over a few spawned worker processes, each worker
holding its clients on a few channels and reporting to the parent on one queue.

A worker runs one client coroutine per cluster (registered first if its plan says so) until the parent
stops it; a client that ends on its own, or raises, fails the run. The processes are spawned, so a plan's
client must be importable by reference: a module-level function, or a functools.partial of one.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import queue
import time
import traceback
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from multiprocessing.context import SpawnContext
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Event as StopEvent
from typing import Any

import grpc
import httpx

from bench.common import raise_fd_limit
from meshplane.agent.channel import channel_target, server_config
from meshplane.proto.v1 import control_plane_pb2, control_plane_pb2_grpc
from meshplane.xds.client import RECONNECT_CHANNEL_OPTIONS
from meshplane_testing import documents
from meshplane_testing.north import put

BACKEND_PORT = 9
"""Where the APIs the clients are given send traffic: nothing does, only the configuration matters."""
STREAMS_PER_CHANNEL = 50
REGISTRATIONS_IN_FLIGHT = 16
"""Concurrent RegisterCluster calls per worker while it starts."""

Report = tuple[Any, ...]
"""What goes on the reports queue: (kind, worker index, *fields)."""
Client = Callable[[str, grpc.aio.Channel, "WorkerPlan", "Tally"], Awaitable[None]]
"""What runs for one cluster in a worker: (cluster, its channel, the worker's plan, the worker's tally)."""


@dataclass(frozen=True)
class WorkerPlan:
    """What one worker process runs: its clients (cluster names), against which server, doing what."""

    index: int
    address: str
    clusters: tuple[str, ...]
    client: Client
    register: bool = True
    """Register each cluster (RegisterCluster) before its client starts, as an agent does."""
    expected: int = 0
    """Objects each client must hold before it calls Tally.ready (its own business to count them)."""


class Tally:
    """A worker's side of the reports queue: readiness and receive times aggregated over its clients (one
    report once all of them are there), and any other report sent as is."""

    def __init__(self, plan: WorkerPlan, reports: multiprocessing.Queue[Report]) -> None:
        self._plan = plan
        self._reports = reports
        self._times: dict[Hashable, list[float]] = {}
        self._ready: set[str] = set()

    def got(self, key: Hashable, at: float, size: int) -> None:
        """A client received `key` (a version, a change number) at `at`; the last of them is reported."""
        times = self._times.setdefault(key, [])
        times.append(at)
        if len(times) == len(self._plan.clusters):
            self._reports.put(("got", self._plan.index, key, max(times), size))
            del self._times[key]

    def ready(self, cluster: str) -> None:
        if cluster not in self._ready:
            self._ready.add(cluster)
            if len(self._ready) == len(self._plan.clusters):
                self._reports.put(("ready", self._plan.index))

    def send(self, kind: str, *fields: Any) -> None:
        self._reports.put((kind, self._plan.index, *fields))


def channel(address: str) -> grpc.aio.Channel:
    """A channel with its own connection (not the process-wide subchannel pool), reconnecting as agents do;
    given several server addresses (comma-separated), it starts at one of them and moves on as an agent does."""
    options = [
        ("grpc.use_local_subchannel_pool", 1),
        ("grpc.service_config", server_config("{}")),
        *RECONNECT_CHANNEL_OPTIONS,
    ]
    return grpc.aio.insecure_channel(channel_target(address), options=options)


async def register(cluster: str, shared: grpc.aio.Channel, gate: asyncio.Semaphore) -> None:
    async with gate:
        stub = control_plane_pb2_grpc.ControlPlaneStub(shared)
        await stub.RegisterCluster(control_plane_pb2.RegisterClusterRequest(cluster=cluster), timeout=60)


async def run_worker(plan: WorkerPlan, reports: multiprocessing.Queue[Report], stop: StopEvent) -> None:
    tally = Tally(plan, reports)
    channels = [channel(plan.address) for _ in range(0, len(plan.clusters), STREAMS_PER_CHANNEL)]
    shared = [channels[i // STREAMS_PER_CHANNEL] for i in range(len(plan.clusters))]
    if plan.register:
        gate = asyncio.Semaphore(REGISTRATIONS_IN_FLIGHT)
        await asyncio.gather(*(register(cluster, shared[i], gate) for i, cluster in enumerate(plan.clusters)))
    tasks = [
        asyncio.create_task(plan.client(cluster, shared[i], plan, tally)) for i, cluster in enumerate(plan.clusters)
    ]
    try:
        stopped = asyncio.create_task(asyncio.to_thread(stop.wait))
        done, _ = await asyncio.wait([stopped, *tasks], return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is not stopped:
                task.result()  # a client that ended on its own is a failure: raise what it raised
                raise RuntimeError("a client stopped by itself")
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(c.close() for c in channels))


def worker_main(plan: WorkerPlan, reports: multiprocessing.Queue[Report], stop: StopEvent) -> None:
    """Entry point of a worker process: run its clients until `stop` is set; report any failure."""
    raise_fd_limit()
    try:
        asyncio.run(run_worker(plan, reports, stop))
    except BaseException:
        reports.put(("error", plan.index, traceback.format_exc()))
        raise


class Workers:
    """The worker processes of one measurement, their reports on one queue; all stopped on exit."""

    def __init__(self, plans: list[WorkerPlan]) -> None:
        context: SpawnContext = multiprocessing.get_context("spawn")
        self.reports: multiprocessing.Queue[Report] = context.Queue()
        self._stop = context.Event()
        self._processes: list[BaseProcess] = [
            context.Process(target=worker_main, args=(plan, self.reports, self._stop), daemon=True) for plan in plans
        ]
        self._seen: set[Hashable] = set()
        self._pending: dict[Hashable, dict[int, float]] = {}
        self.size = 0

    def __enter__(self) -> Workers:
        for process in self._processes:
            process.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for process in self._processes:
            process.join(timeout=15)
            if process.is_alive():
                process.terminate()
                process.join(timeout=5)

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self._processes if process.pid is not None]

    def next(self, deadline: float) -> tuple[Any, ...]:
        """The next report (a time.monotonic() deadline); a worker's failure is raised here, and TimeoutError
        past the deadline."""
        try:
            report = self.reports.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise TimeoutError("the workers did not report in time") from None
        if report[0] == "error":
            raise RuntimeError(f"worker {report[1]} failed:\n{report[2]}")
        if report[0] == "got":
            _, worker, key, at, size = report
            if key not in self._seen:
                self._pending.setdefault(key, {})[worker] = at
                self.size = max(self.size, size)
        return report

    def wait_ready(self, timeout: float) -> None:
        """Until every worker says all its clients hold what they should; what they hold now is not news."""
        deadline = time.monotonic() + timeout
        ready = 0
        while ready < len(self._processes):
            report = self.next(deadline)
            if report[0] not in ("ready", "got"):
                raise RuntimeError(f"a worker reported {report!r} before all clients were ready")
            ready += report[0] == "ready"
        self._seen.update(self._pending)
        self._pending.clear()

    def wait_last(self, timeout: float) -> float:
        """When the last client received the next new key (a time.time())."""
        deadline = time.monotonic() + timeout
        while True:
            for key, times in self._pending.items():
                if len(times) == len(self._processes):
                    self._seen.add(key)
                    del self._pending[key]
                    return max(times.values())
            self.next(deadline)


def plans(
    address: str, prefix: str, agents: int, workers: int, client: Client, *, register: bool = True, expected: int = 0
) -> list[WorkerPlan]:
    """`agents` clients named <prefix>-<i>, dealt round-robin over at most `workers` workers."""
    clusters = [f"{prefix}-{i}" for i in range(agents)]
    return [
        WorkerPlan(w, address, tuple(clusters[w::workers]), client, register, expected)
        for w in range(min(workers, agents))
        if clusters[w::workers]
    ]


def put_api(api: httpx.Client, name: str, base_path: str, backend_base_path: str = "/") -> None:
    """An API for every cluster (no placement): what the clients are given to hold."""
    put(
        api,
        documents.api(name, basePath=base_path, backends=[documents.backend(BACKEND_PORT, basePath=backend_base_path)]),
    )
