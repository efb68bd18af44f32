"""kill -9 of the management server mid-burst, many rounds: how long the agent takes to converge again.

Each round writes a burst concurrently, kills the server once a third of the writes have been
answered, restarts it on the same ports with the same store, checks that every acknowledged write is
there and waits until the agent holds exactly the store's projection. Prints one JSON object.

    .venv/bin/python -m bench.kill_rounds --rounds 100 [--burst 20] [--postgres] [--quick]
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import parser as common_parser
from bench.common import percentile
from meshplane_testing.faults import kill_rounds
from meshplane_testing.postgres import start_postgres


@contextlib.contextmanager
def database(postgres: bool, work: Path) -> Iterator[str | None]:
    """None (the server's SQLite file) or the URL of a fresh database on a private PostgreSQL."""
    if not postgres:
        yield None
        return
    (work / "postgres").mkdir()
    with start_postgres(work / "postgres") as server:
        yield asyncio.run(server.create_database())


def main() -> None:
    parser = common_parser(__doc__, "3 rounds of 10 writes: proves the benchmark runs")
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--burst", type=int, default=20, help="concurrent writes per round")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--postgres", action="store_true", help="a private PostgreSQL instead of SQLite")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.burst = 3, 10

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kill-rounds-") as work, database(args.postgres, Path(work)) as url:
        rounds = kill_rounds(Path(work), args.rounds, database_url=url, burst=args.burst, seed=args.seed)
    total = time.monotonic() - started

    converge = [r.converge_s for r in rounds]
    restart = [r.restart_s for r in rounds]
    print(
        json.dumps(
            {
                "rounds": len(rounds),
                "burst": args.burst,
                "store": "postgresql" if args.postgres else "sqlite",
                "converge_s": {
                    "p50": round(statistics.median(converge), 3),
                    "p99": round(percentile(converge, 0.99), 3),
                    "max": round(max(converge), 3),
                },
                "restart_s": {"p50": round(statistics.median(restart), 3), "max": round(max(restart), 3)},
                "writes_acknowledged": sum(r.acknowledged for r in rounds),
                "writes_unanswered": sum(r.unanswered for r in rounds),
                "acknowledged_writes_lost": sum(len(r.lost) for r in rounds),
                "total_s": round(total, 1),
            }
        )
    )
    if any(r.lost for r in rounds):
        sys.exit(1)


if __name__ == "__main__":
    main()
