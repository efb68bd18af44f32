"""REST writes per second: PUTs of distinct APIs (distinct basePaths, so no route clashes), several clients.

The clients are wrk's connections, one thread; a Lua script names a new API in every PUT. (A Python client
would be the bottleneck: eight httpx clients in one process top out near 1,100 PUTs/s here, at 100% of a core,
against a server that answers them with 30% of one.) Every write creates a new API, so each commits an
object, its event and the next revision. No agent is connected. The server runs on SQLite and on PostgreSQL.

Two floors, in the same run. The database: on the same PostgreSQL, as many asyncpg connections each updating
its own row (`UPDATE ... SET n = n + 1 WHERE id = $1`, autocommit); the same with every connection on one
counter row (the row lock a revision takes) is shown beside it. The HTTP stack the API is built on: the same
PUTs from the same wrk to a FastAPI route on uvicorn, configured as the server's, that parses the body into a
dict and answers it back, in a process of its own. The target is PostgreSQL's rate at 0.3x the HTTP floor's.
Prints one JSON object.

    .venv/bin/python -m bench.writes [--seconds 10] [--clients 8] [--sqlite | --postgres] [--quick]
"""

from __future__ import annotations

import asyncio
import json
import string
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import asyncpg

from bench.common import (
    POSTGRESQL,
    add_store_arguments,
    api_path,
    database_url,
    distribution,
    emit,
    parser,
    postgres_for,
    ratio,
    selected_stores,
    server_on,
    wrk,
)
from meshplane_testing.documents import api, backend
from meshplane_testing.postgres import PostgresServer
from meshplane_testing.process import free_port, port_open, running

WARMUP = 20
"""asyncpg statements made before the floor's timing starts, so connections are warm."""
WARMUP_SECONDS = 1
"""PUTs made for this long before a timed run, so connections and caches are warm on both sides."""
FLOOR_STATEMENTS = 20_000
PUT_SCRIPT = string.Template(
    """
local template = [=[$document]=]
local made = 0
local headers = nil
request = function()
  if headers == nil then
    headers = {["Content-Type"] = "application/json"}
    for name, value in pairs(wrk.headers) do headers[name] = value end
  end
  made = made + 1
  local name = "$prefix" .. made
  local body = template:gsub("@name@", name)
  return wrk.format("PUT", "$path" .. name, headers, body)
end
"""
)
"""wrk's request for every PUT: a new API named `prefix` and a count, from one API document."""
TARGET_RATIO = 0.3
"""Of the HTTP floor, on PostgreSQL: a whole write at a third of the speed of a handler that does nothing."""
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


def puts(work: Path, url: str, headers: dict[str, str], clients: int, seconds: int) -> dict[str, Any]:
    """PUTs of distinct APIs at `url` from `clients` connections for `seconds`, after a warm-up."""
    document = json.dumps(api("@name@", basePath="/@name@", backends=[backend(BACKEND_PORT, basePath="/")]))
    runs = {}
    for prefix, duration in (("warm", WARMUP_SECONDS), ("w", seconds)):
        script = work / f"puts-{prefix}.lua"
        script.write_text(PUT_SCRIPT.substitute(document=document, prefix=prefix, path=api_path("")))
        runs[prefix] = wrk(url, headers, duration, clients, script)
        if runs[prefix]["non_2xx"]:
            raise RuntimeError(f"{url} refused {runs[prefix]['non_2xx']:.0f} of the PUTs: the rate would mean nothing")
    measured = runs["w"]
    return {"per_second": measured["rps"], "latency_ms": {"p50": measured["p50_ms"], "p99": measured["p99_ms"]}}


async def through_meshplane(
    work: Path, store: str, database: PostgresServer | None, clients: int, seconds: int
) -> dict[str, Any]:
    with server_on(work, store, await database_url(store, database)) as server:
        return puts(work, server.url, server.headers, clients, seconds)


ECHO_SERVER = """
import uvicorn
from fastapi import FastAPI

app = FastAPI()


@app.put("/v1/projects/{{project}}/apis/{{name}}")
async def put(project: str, name: str, document: dict) -> dict:
    return document


config = uvicorn.Config(app, host="127.0.0.1", port={port}, loop="uvloop", log_config=None, access_log=False)
server = uvicorn.Server(config)
server.run()
"""
"""The HTTP floor's server: uvicorn and FastAPI as meshplane's API runs them, doing nothing with the body."""


def http_floor(work: Path, clients: int, seconds: int) -> dict[str, Any]:
    port = free_port()
    argv = [sys.executable, "-c", ECHO_SERVER.format(port=port)]
    with running(argv, work / "http-floor.log") as process:
        process.wait_ready(lambda: port_open(port), 30.0, "the HTTP floor's server")
        return puts(work, f"http://127.0.0.1:{port}", {}, clients, seconds)


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


async def run(stores: list[str], clients: int, seconds: int, statements: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="meshplane-bench-") as tmp_dir:
        work = Path(tmp_dir)
        with postgres_for(work, stores) as database:
            bare = await floor(database, clients, statements) if database is not None else None
            http = http_floor(work, clients, seconds)
            results = {store: await through_meshplane(work, store, database, clients, seconds) for store in stores}
    report: dict[str, Any] = {
        "benchmark": "writes",
        "seconds": seconds,
        "clients": clients,
        "results": results,
        "floor_postgresql_updates": bare,
        "floor_http_echo": http,
        "ratio_to_http_floor": {
            store: ratio(result["per_second"], http["per_second"]) for store, result in results.items()
        },
    }
    if bare is not None and POSTGRESQL in results:
        measured = results[POSTGRESQL]["per_second"]
        report["ratio_to_postgresql_floor"] = {
            "own_row": ratio(measured, bare["per_second"]),
            "counter_row": ratio(measured, bare["counter_row"]["per_second"]),
        }
        report["target_ratio_to_http_floor"] = TARGET_RATIO
        report["met"] = measured >= TARGET_RATIO * http["per_second"]
    return report


def main() -> None:
    arguments = parser(__doc__, "two-second runs: proves the benchmark runs")
    arguments.add_argument("--seconds", type=int, default=10, help="how long each configuration is loaded")
    arguments.add_argument("--clients", type=int, default=8)
    add_store_arguments(arguments)
    args = arguments.parse_args()
    seconds, statements = (2, 2000) if args.quick else (args.seconds, FLOOR_STATEMENTS)
    started = time.monotonic()
    emit(asyncio.run(run(selected_stores(args), args.clients, seconds, statements)), started)


if __name__ == "__main__":
    main()
