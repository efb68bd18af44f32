"""Catch-up: an agent offline while thousands of changes hit its objects, then back.

A real agent holds `--objects` APIs and stops; `--changes` PUTs (each object changed the same number of
times, in shuffled order, by 8 concurrent writers) go to the server (SQLite) while it is away. The agent
then starts again through a TCP proxy that counts every byte the server sends it. Measured: seconds from
the agent's start until it holds exactly what the store places on its cluster, the rounds it took (API
updates it applied), and the bytes on the wire against the floor: the bytes of the final distinct objects
it ends up holding (names, versions, serialized messages). Prints one JSON object.

    .venv/bin/python -m bench.catchup [--objects 1000] [--changes 10000] [--quick]
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import emit, parser, ratio
from meshplane_testing.convergence import assert_converged, held_bytes
from meshplane_testing.eventually import eventually
from meshplane_testing.faults import Write, Writers, applied_updates, projection_matches_store
from meshplane_testing.meshplane import run_agent, run_server
from meshplane_testing.tcp_proxy import run_tcp_proxy

CLUSTER = "edge-catchup"
WRITERS = 8
WRITE_TIMEOUT = 60.0
TARGETS = {"rounds": 1, "wire_to_objects": 1.2}


def name_of(index: int) -> str:
    return f"api-{index:05d}"


def offline_writes(objects: int, changes: int, seed: int) -> list[Write]:
    """`changes` PUTs spread evenly over the objects, shuffled; each gives its API a new backend port."""
    writes = [Write("PUT", name_of(i % objects), port=20_000 + i % 40_000) for i in range(changes)]
    random.Random(seed).shuffle(writes)
    return writes


def send(writers: Writers, writes: list[Write]) -> float:
    """Send every write; fail on any write the server did not acknowledge. The writes per second."""
    started = time.monotonic()
    refused = [w for w in writers.run(writes) if not w.acknowledged]
    if refused:
        raise RuntimeError(f"{len(refused)} writes not acknowledged, e.g. {refused[0]}")
    return len(writes) / (time.monotonic() - started)


def run(work: Path, objects: int, changes: int, seed: int) -> dict[str, Any]:
    state_dir = work / f"agent-{CLUSTER}"
    converge_timeout = 60 + objects * 0.05
    with run_server(work, insecure=True) as server, Writers(server, WRITERS, WRITE_TIMEOUT) as writers:
        with run_agent(work, CLUSTER, server):
            send(writers, [Write("PUT", name_of(i), port=10_000 + i) for i in range(objects)])
            assert_converged(server, state_dir, CLUSTER, converge_timeout)

        offline_rate = send(writers, offline_writes(objects, changes, seed))
        eventually(
            lambda: projection_matches_store(server, CLUSTER),
            timeout=converge_timeout,
            what="the projection to take every change",
        )

        log = work / f"agent-{CLUSTER}.log"
        updates_before = len(applied_updates(log.read_text()))
        with run_tcp_proxy(server.grpc_port) as proxy, run_agent(work, CLUSTER, proxy.address, insecure=True):
            started = time.monotonic()
            assert_converged(server, state_dir, CLUSTER, converge_timeout)
            converged = time.monotonic() - started
            updates = applied_updates(log.read_text())[updates_before:]
            wire = proxy.bytes_downstream
        final = held_bytes(state_dir)
    return {
        "converge_s": round(converged, 2),
        "rounds": len(updates),
        "upserts": sum(u.get("upserts", 0) for u in updates),
        "removals": sum(u.get("removed", 0) for u in updates),
        "wire_bytes": wire,
        "final_object_bytes": final,
        "wire_to_objects": ratio(wire, final),
        "offline_writes_per_s": round(offline_rate, 1),
    }


def main() -> None:
    arguments = parser(__doc__, "100 objects, 1,000 changes: proves the benchmark runs")
    arguments.add_argument("--objects", type=int, default=1000, help="APIs the agent holds")
    arguments.add_argument("--changes", type=int, default=10_000, help="PUTs while the agent is away")
    arguments.add_argument("--seed", type=int, default=1)
    args = arguments.parse_args()
    objects, changes = (100, 1000) if args.quick else (args.objects, args.changes)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="meshplane-bench-") as work:
        measured = run(Path(work), objects, changes, args.seed)
    report = {
        "benchmark": "catchup",
        "objects": objects,
        "changes": changes,
        **measured,
        "targets": TARGETS,
        "met": {
            "rounds": measured["rounds"] <= TARGETS["rounds"],
            "wire_to_objects": measured["wire_to_objects"] is not None
            and measured["wire_to_objects"] <= TARGETS["wire_to_objects"],
        },
    }
    emit(report, started)


if __name__ == "__main__":
    main()
