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
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import cpu_seconds, emit, parser, raise_fd_limit, wait_quiet
from bench.fleet import STREAMS_PER_CHANNEL, Workers, plans, put_api
from bench.holding import Aftermath, holding_client
from meshplane_testing.meshplane import run_server
from meshplane_testing.process import free_port

CLUSTERS = "storm"
"""Clients are clusters storm-0, storm-1, ..."""
SERVER = "server-storm"
QUIET_TIMEOUT = 300.0
DRAIN = 1.0
"""Seconds without a report, once the server is quiet, after which every client has told what it received."""
TARGETS = {"all_in_sync_s": 10.0, "objects_resent": 0}


def storm(work: Path, agents: int, workers: int, objects: int) -> dict[str, Any]:
    ports = (free_port(), free_port())
    with contextlib.ExitStack() as stack:
        first = stack.enter_context(run_server(work, name=SERVER, ports=ports, insecure=True))
        with first.http(timeout=60) as api:
            for index in range(objects):
                put_api(api, f"o{index}", f"/o{index}")
        wait_quiet(first.process.pid, QUIET_TIMEOUT)
        started = time.monotonic()
        fleet = plans(first.grpc_address, CLUSTERS, agents, workers, holding_client, expected=objects)
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
        "after_restart": aftermath.traffic(),
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
