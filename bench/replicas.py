"""Replicas: a fleet of 10,000 agents spread over 4 server replicas on one PostgreSQL; how long one change
takes to reach the last of them, what each agent costs the servers in memory, and what happens when one
replica is killed (-9).

N sync clients, each the project's own delta ADS client (meshplane.xds.client.DeltaClient, as the agent
builds it), run in a few worker processes over several channels. Each channel is given every replica's
address and, like the agent's, starts at one of them (gRPC's pick_first over the shuffled list) and moves
to another when that one goes; each client is registered as its own cluster through its channel. Every
cluster is given 200 APIs plus one more (plaintext sync). Server RSS is read on every replica with the
objects written and no client, then with all N clients holding them and the replicas quiet: per agent =
the sum of the growths / N. Then the one more API is changed (`--changes` times, each once every replica
is quiet again), through the first replica's north API; a change is timed from just before its PUT until
the last client has received it (time.time() in every process: one machine, one clock). Last, the replica
holding the most agents (with `--kill leader`, the one leading the status roll-up) is killed with SIGKILL
and not started again: its clients reconnect to the others on their own. `killed_the_leader` says whether
it led the roll-up, which another replica then takes over with a pass over every object while the clients
move. A client is back in sync when the first API
response of a stream after the kill has reached it and it holds exactly what it held before; an upsert of
a name at the version it already held is an object resent. Every client must be back (each replica's
meshplane_connected_agents, read before the kill, says how many were on the one killed), and the survivors
must then count all N. Prints one JSON object; exits 1 if a worker fails or a wait times out.

    .venv/bin/python -m bench.replicas [--agents 10000] [--replicas 4] [--objects 200] [--changes 10]
        [--workers 4] [--kill most-agents|leader] [--quick]
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    POSTGRESQL,
    PROJECT,
    cpu_seconds,
    distribution,
    emit,
    parser,
    postgres_for,
    raise_fd_limit,
    rss_bytes,
    wait_quiet,
)
from bench.fleet import STREAMS_PER_CHANNEL, Workers, plans, put_api
from bench.holding import Aftermath, holding_client
from meshplane_testing.meshplane import ServerProcess, run_replica, run_server

CLUSTERS = "fleet"
"""Clients are clusters fleet-0, fleet-1, ..."""
WATCHED = "fleet-watched"
QUIET_TIMEOUT = 600.0
CHANGE_TIMEOUT = 120.0
DRAIN = 1.0
"""Seconds without a report, once the survivors are quiet, after which every client has told what it got."""
TARGETS = {"p99_to_last_agent_ms": 2000.0, "all_in_sync_s": 10.0, "objects_resent": 0, "bytes_per_agent": 100 * 1024}


def connected_agents(server: ServerProcess) -> int:
    return round(server.scrape().total("meshplane_connected_agents"))


def total_cpu(pids: Sequence[int]) -> float:
    """The CPU seconds these processes have used so far, summed."""
    return sum(cpu_seconds(pid) for pid in pids)


def all_quiet(servers: Sequence[ServerProcess]) -> float:
    """Until every replica is quiet (each waited for in turn); the seconds that took."""
    return sum(wait_quiet(server.process.pid, QUIET_TIMEOUT) for server in servers)


def fleet(
    work: Path, database_url: str, agents: int, replicas: int, workers: int, objects: int, changes: int, kill: str
) -> dict[str, Any]:
    with contextlib.ExitStack() as stack:
        first = stack.enter_context(run_server(work, database_url, name="replica-0", insecure=True))
        servers = [first] + [
            stack.enter_context(run_replica(work, first, database_url, f"replica-{index}"))
            for index in range(1, replicas)
        ]
        api = stack.enter_context(first.http(timeout=60))
        for index in range(objects):
            put_api(api, f"o{index}", f"/o{index}")
        put_api(api, WATCHED, f"/{WATCHED}", "/start")
        all_quiet(servers)
        rss_0 = [rss_bytes(server.process.pid) for server in servers]

        started = time.monotonic()
        addresses = ",".join(server.grpc_address for server in servers)
        client = functools.partial(holding_client, watched=f"{PROJECT}/{WATCHED}")
        pool = stack.enter_context(Workers(plans(addresses, CLUSTERS, agents, workers, client, expected=objects + 1)))
        pool.wait_ready(timeout=60 + agents * 0.5)
        initial_sync = time.monotonic() - started
        settled = all_quiet(servers)
        rss_n = [rss_bytes(server.process.pid) for server in servers]
        spread = [connected_agents(server) for server in servers]
        if sum(spread) != agents:
            raise RuntimeError(f"the replicas count {spread} agents connected, not {agents} in all")

        server_pids = [server.process.pid for server in servers]
        timings, servers_cpu, clients_cpu = [], [], []
        for change in range(changes):
            servers_used, clients_used, at = total_cpu(server_pids), total_cpu(pool.pids), time.time()
            put_api(api, WATCHED, f"/{WATCHED}", f"/c{change}")
            timings.append((pool.wait_last(CHANGE_TIMEOUT) - at) * 1000)
            all_quiet(servers)
            servers_cpu.append((total_cpu(server_pids) - servers_used) * 1000)
            clients_cpu.append((total_cpu(pool.pids) - clients_used) * 1000)

        leading = [server.scrape().total("meshplane_leader") == 1 for server in servers]
        victim = leading.index(True) if kill == "leader" else max(range(replicas), key=spread.__getitem__)
        survivors = [server for index, server in enumerate(servers) if index != victim]
        cpu_before = [cpu_seconds(server.process.pid) for server in survivors]
        servers[victim].process.kill()
        killed = time.time()
        aftermath = Aftermath(killed)
        deadline = time.monotonic() + 60 + agents * 0.01
        while len(aftermath.synced) < spread[victim]:
            aftermath.take(pool.next(deadline))
        cpu_in_sync = [
            cpu_seconds(server.process.pid) - used for server, used in zip(survivors, cpu_before, strict=True)
        ]
        busy = all_quiet(survivors)
        with contextlib.suppress(TimeoutError):
            while True:
                aftermath.take(pool.next(time.monotonic() + DRAIN))
        after = [connected_agents(server) for server in survivors]
        if len(aftermath.synced) != spread[victim] or sum(after) != agents:
            raise RuntimeError(
                f"{len(aftermath.synced)} agents resynced, {spread[victim]} were on the killed replica; "
                f"the survivors count {after} connected"
            )
        for server in survivors:
            if not server.process.alive():
                raise RuntimeError(f"a surviving replica died:\n{server.process.log()[-4000:]}")
    growth = sum(rss_n) - sum(rss_0)
    kill = {
        "agents_moved": spread[victim],
        "killed_the_leader": leading[victim],
        **aftermath.figures(killed),
        "survivors_busy_after_all_in_sync_s": round(busy, 1),
        "survivors_cpu_s_until_in_sync": [round(used, 2) for used in cpu_in_sync],
        "agents_per_survivor": after,
        **aftermath.traffic(),
    }
    return {
        "register_and_initial_sync_s": round(initial_sync, 1),
        "busy_after_initial_sync_s": round(settled, 1),
        "agents_per_replica": spread,
        "server_rss_mb": {
            "no_agents": [round(rss / 2**20, 1) for rss in rss_0],
            "agents_idle": [round(rss / 2**20, 1) for rss in rss_n],
        },
        "bytes_per_agent": round(growth / agents),
        "to_last_agent_ms": distribution(timings),
        # What a change costs, from its PUT until every replica is quiet again (idle time included): the
        # replicas and the clients share the machine's cores, so both are in the time to the last agent.
        "cpu_ms_per_change": {"replicas": distribution(servers_cpu, 0), "clients": distribution(clients_cpu, 0)},
        "change_bytes": pool.size,
        "kill": kill,
    }


def run(agents: int, replicas: int, workers: int, objects: int, changes: int, kill: str) -> dict[str, Any]:
    raise_fd_limit()
    with tempfile.TemporaryDirectory(prefix="meshplane-bench-") as work, postgres_for(Path(work), [POSTGRESQL]) as pg:
        assert pg is not None
        database = asyncio.run(pg.create_database())
        measured = fleet(Path(work), database, agents, replicas, workers, objects, changes, kill)
    kill = measured["kill"]
    return {
        "benchmark": "replicas",
        "agents": agents,
        "replicas": replicas,
        "store": POSTGRESQL,
        "apis_per_agent": objects + 1,
        "changes": changes,
        "workers": workers,
        "streams_per_channel": STREAMS_PER_CHANNEL,
        **measured,
        "targets": TARGETS,
        "met": {
            "p99_to_last_agent_ms": measured["to_last_agent_ms"]["p99"] <= TARGETS["p99_to_last_agent_ms"],
            "all_in_sync_s": kill["all_in_sync_s"] <= TARGETS["all_in_sync_s"],
            "objects_resent": kill["objects_resent"] <= TARGETS["objects_resent"],
            "bytes_per_agent": measured["bytes_per_agent"] <= TARGETS["bytes_per_agent"],
        },
    }


def main() -> None:
    arguments = parser(__doc__, "2 replicas, 100 agents x 10 objects, 3 changes: proves the benchmark runs")
    arguments.add_argument("--agents", type=int, default=10_000)
    arguments.add_argument("--replicas", type=int, default=4)
    arguments.add_argument("--objects", type=int, default=200, help="APIs every agent holds besides the changed one")
    arguments.add_argument("--changes", type=int, default=10)
    arguments.add_argument("--workers", type=int, default=4, help="processes holding the clients")
    arguments.add_argument(
        "--kill", choices=["most-agents", "leader"], default="most-agents", help="which replica is killed"
    )
    args = arguments.parse_args()
    started = time.monotonic()
    if args.quick:
        agents, replicas, objects, changes = 100, 2, 10, 3
    else:
        agents, replicas, objects, changes = args.agents, args.replicas, args.objects, args.changes
    try:
        report = run(agents, replicas, args.workers, objects, changes, args.kill)
    except (RuntimeError, TimeoutError) as exc:
        sys.exit(f"replicas failed: {exc}")
    emit(report, started)


if __name__ == "__main__":
    main()
