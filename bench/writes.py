"""REST writes per second: PUTs of distinct APIs (distinct basePaths, so no route clashes), several clients.

Each client is an httpx.AsyncClient with its own connection, all in one asyncio loop; every write creates
a new API, so each commits an object, its event and the next revision. No agent is connected. The server
runs on SQLite and on PostgreSQL. The floor, in the same run and on the same PostgreSQL: as many asyncpg
connections each updating its own row (`UPDATE ... SET n = n + 1 WHERE id = $1`, autocommit), the same
number of statements; the same with every connection on one counter row (the row lock a revision takes)
is shown beside it. Prints one JSON object.

    .venv/bin/python -m bench.writes [--writes 2000] [--clients 8] [--sqlite | --postgres] [--quick]
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import asyncpg
import httpx

from bench.common import (
    POSTGRESQL,
    add_store_arguments,
    api_document,
    api_path,
    database_url,
    distribution,
    emit,
    parser,
    postgres_for,
    ratio,
    selected_stores,
    server_on,
)
from tests.harness.postgres import PostgresServer

WARMUP = 20
"""Writes made before timing starts, so connections and caches are warm on both sides."""
TARGET_RATIO = 0.3
BACKEND_PORT = 9


async def concurrently(clients: int, writes: int, write: Callable[[int], Awaitable[None]]) -> dict[str, Any]:
    """`writes` calls of write(client) spread over `clients` tasks, each making the next call as soon as its
    last one is answered; the rate and the latency of each call."""
    turns = iter(range(writes))
    latencies: list[float] = []
    answered: list[float] = []

    async def worker(client: int) -> None:
        for _ in turns:  # shared: `writes` turns in all
            started = time.perf_counter()
            await write(client)
            answered.append(time.perf_counter())
            latencies.append((answered[-1] - started) * 1000)

    started = time.perf_counter()
    await asyncio.gather(*(worker(client) for client in range(clients)))
    tenth = max(1, writes // 10)
    last_tenth_from = answered[-tenth - 1] if writes > tenth else started
    return {
        "per_second": round(writes / (answered[-1] - started), 1),
        # A rate that falls as the run goes on means a write costs more the more objects there are.
        "per_second_first_tenth": round(tenth / (answered[tenth - 1] - started), 1),
        "per_second_last_tenth": round(tenth / (answered[-1] - last_tenth_from), 1),
        "latency_ms": distribution(latencies),
    }


async def through_meshplane(
    work: Path, store: str, database: PostgresServer | None, clients: int, writes: int
) -> dict[str, Any]:
    with server_on(work, store, await database_url(store, database)) as server:
        api = [httpx.AsyncClient(base_url=server.url, headers=server.headers, timeout=30) for _ in range(clients)]
        names = itertools.count()
        try:

            async def put(client: int) -> None:
                name = f"w{next(names)}"
                document = api_document(name, f"/{name}", BACKEND_PORT)
                (await api[client].put(api_path(name), json=document)).raise_for_status()

            await concurrently(clients, WARMUP, put)
            return await concurrently(clients, writes, put)
        finally:
            await asyncio.gather(*(client.aclose() for client in api))


async def floor(database: PostgresServer, clients: int, writes: int) -> dict[str, Any]:
    """Single-statement updates through asyncpg: a row per connection, and all connections on one row."""
    url = (await database.create_database()).replace("postgresql+asyncpg://", "postgresql://")
    connections = [await asyncpg.connect(url) for _ in range(clients)]
    try:
        await connections[0].execute("CREATE TABLE bench_rows (id integer PRIMARY KEY, n bigint NOT NULL)")
        await connections[0].executemany("INSERT INTO bench_rows VALUES ($1, 0)", [(i,) for i in range(clients)])

        def updating(row_of: Callable[[int], int]) -> Callable[[int], Awaitable[None]]:
            async def update(client: int) -> None:
                await connections[client].execute("UPDATE bench_rows SET n = n + 1 WHERE id = $1", row_of(client))

            return update

        own_row, counter_row = updating(lambda client: client), updating(lambda client: 0)
        await concurrently(clients, WARMUP, own_row)
        result = await concurrently(clients, writes, own_row)
        result["counter_row"] = await concurrently(clients, writes, counter_row)
        return result
    finally:
        await asyncio.gather(*(connection.close() for connection in connections))


async def run(stores: list[str], clients: int, writes: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="meshplane-bench-") as tmp_dir:
        work = Path(tmp_dir)
        with postgres_for(work, stores) as database:
            bare = await floor(database, clients, writes) if database is not None else None
            results = {store: await through_meshplane(work, store, database, clients, writes) for store in stores}
    report: dict[str, Any] = {
        "benchmark": "writes",
        "writes": writes,
        "clients": clients,
        "results": results,
        "floor_postgresql_updates": bare,
    }
    if bare is not None and POSTGRESQL in results:
        measured = results[POSTGRESQL]["per_second"]
        report["ratio_to_floor"] = {
            "own_row": ratio(measured, bare["per_second"]),
            "counter_row": ratio(measured, bare["counter_row"]["per_second"]),
        }
        report["target_ratio"] = TARGET_RATIO
        report["met"] = measured >= TARGET_RATIO * bare["per_second"]
    return report


def main() -> None:
    arguments = parser(__doc__, "200 writes: proves the benchmark runs")
    arguments.add_argument("--writes", type=int, default=2000)
    arguments.add_argument("--clients", type=int, default=8)
    add_store_arguments(arguments)
    args = arguments.parse_args()
    started = time.monotonic()
    emit(asyncio.run(run(selected_stores(args), args.clients, 200 if args.quick else args.writes)), started)


if __name__ == "__main__":
    main()
