"""What one changed API costs on a cluster that holds many: the same at 100, 1,000 and 10,000 APIs, or not.

For each catalog size a server (SQLite), one agent and one real Envoy run as separate processes, with an
nginx upstream that answers with the path it receives. The catalog is created and served first; then one
API's backend basePath is changed again and again, each change timed from the PUT until the gateway answers
with it. Around each change every process is left to go quiet first, so what it costs is read cleanly: the
CPU the server, the agent and Envoy spent on it (until all three are quiet again, less what each spends
idle over as long, so a figure may come out just below zero), and the bytes the agent pushed to its
gateway and the server pushed to the agent (their `meshplane_xds_pushed_bytes_total`). The figure that
matters is how each grows from the smallest catalog to the largest: 1.5x at most is met. Prints one JSON
object.

    .venv/bin/python -m bench.incremental [--sizes 100,1000,10000] [--changes 5] [--quick]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from bench.common import cpu_seconds, emit, nginx, parser, ratio, server_on, wait_quiet
from bench.propagation import Poller
from meshplane.bulk import bounded
from meshplane_testing.documents import api, backend
from meshplane_testing.envoy import run_envoy
from meshplane_testing.eventually import eventually_async
from meshplane_testing.meshplane import AgentProcess, ServerProcess, run_agent
from meshplane_testing.metrics import Scrape

PUSHED_BYTES = "meshplane_xds_pushed_bytes_total"
CHANGED = "a0"
"""The API every change is made to: the first of the catalog."""
TARGET_GROWTH = 1.5
QUIET_TIMEOUT = 120.0
LOAD_TIMEOUT = 900.0
IDLE_WINDOW = 5.0
SETTLED_WINDOW = 2.0
SETTLED_BUSY = 0.08
"""At rest: under this share of a core over a whole SETTLED_WINDOW (the idle server's timers are bursty)."""
PROBE = "/p"
GROWING = ("agent_cpu_ms", "envoy_cpu_ms", "gateway_bytes", "sync_bytes")
"""The figures judged by their growth. The server's CPU per change is shown but not judged: net of what it
spends idle (`idle_cpu_ms_per_s`, timers and the status roll-up) it stays within the noise at every size
here; what the server does for a change is what it sends, `sync_bytes`."""
RESOLUTION = {"agent_cpu_ms": 10.0, "envoy_cpu_ms": 10.0}
"""One clock tick of /proc's CPU times: a figure under it at the smallest size has no growth to speak of."""


def catalog_api(index: int, upstream: int, change: int | None = None) -> dict[str, Any]:
    """API `a<index>` under `/a<index>`; the changed one's backend basePath says which change it is at."""
    base = "/start" if change is None else f"/c{change}"
    return api(f"a{index}", basePath=f"/a{index}", backends=[backend(upstream, basePath=base)])


def pushed(scrape: Scrape, server: str) -> float:
    return scrape.total(PUSHED_BYTES, server=server)


async def agent_metrics(agent: AgentProcess) -> Scrape:
    async with httpx.AsyncClient() as http:
        response = await http.get(f"http://{agent.admin_address}/metrics", timeout=10)
        return Scrape(response.raise_for_status().text)


async def quiet(*pids: int) -> None:
    """Until every process has digested what came before (in turn: each check waits on its own)."""
    for pid in pids:
        await asyncio.to_thread(wait_quiet, pid, QUIET_TIMEOUT)


async def settled(*pids: int) -> None:
    """Until every process is at rest, not merely quiet: after a large catalog the server rolls up the
    agent's reports for tens of seconds at a fraction of a core, which would pass for idle."""
    for pid in pids:
        await asyncio.to_thread(wait_quiet, pid, LOAD_TIMEOUT, window=SETTLED_WINDOW, busy=SETTLED_BUSY, calm=1)


async def idle_rates(pids: tuple[int, ...]) -> list[float]:
    """The CPU each process spends per second doing nothing asked of it (timers, the status roll-up): taken
    off each change's window, which waits for quiet and so holds idle time too."""
    before = [cpu_seconds(pid) for pid in pids]
    await asyncio.sleep(IDLE_WINDOW)
    return [(cpu_seconds(pid) - used) / IDLE_WINDOW for pid, used in zip(pids, before, strict=True)]


async def measure_size(work: Path, size: int, upstream: int, changes: int) -> dict[str, Any]:
    """Serve a catalog of `size` APIs, then change one of them `changes` times; the figures of each change."""
    figures: dict[str, list[float]] = {
        key: [] for key in ("served_ms", "server_cpu_ms", "agent_cpu_ms", "envoy_cpu_ms", "gateway_bytes", "sync_bytes")
    }
    with (
        server_on(work, f"incremental-{size}", None) as server,
        run_agent(work, f"inc-{size}", server) as agent,
        run_envoy(work, f"gw-{size}", agent.xds_port) as envoy,
    ):
        envoy.wait_listener(agent.gateway_port)
        loaded = await load_catalog(server, agent, upstream, size)
        pids = (server.process.pid, agent.process.pid, envoy.process.pid)
        await settled(*pids)
        idle = await idle_rates(pids)
        poller = Poller(agent.gateway_port, f"/{CHANGED}{PROBE}")
        async with server.client(timeout=60) as north:
            for change in range(changes):
                await quiet(*pids)
                cpu_before = [cpu_seconds(pid) for pid in pids]
                window_started = time.monotonic()
                gateway_before = pushed(await agent_metrics(agent), "gateway")
                sync_before = pushed(await asyncio.to_thread(server.scrape), "sync")
                started = time.perf_counter()
                await north.put(catalog_api(0, upstream, change))
                await poller.wait_for(f"/c{change}{PROBE}")
                figures["served_ms"].append((time.perf_counter() - started) * 1000)
                await quiet(*pids)
                window = time.monotonic() - window_started
                spent = [
                    cpu_seconds(pid) - before - rate * window
                    for pid, before, rate in zip(pids, cpu_before, idle, strict=True)
                ]
                for key, seconds in zip(("server_cpu_ms", "agent_cpu_ms", "envoy_cpu_ms"), spent, strict=True):
                    figures[key].append(seconds * 1000)
                figures["gateway_bytes"].append(pushed(await agent_metrics(agent), "gateway") - gateway_before)
                figures["sync_bytes"].append(pushed(await asyncio.to_thread(server.scrape), "sync") - sync_before)
        poller.close()
    medians = {key: round(statistics.median(values), 1) for key, values in figures.items()}
    idle_ms = {name: round(rate * 1000, 1) for name, rate in zip(("server", "agent", "envoy"), idle, strict=True)}
    return {"apis": size, "load_seconds": loaded, **medians, "idle_cpu_ms_per_s": idle_ms}


async def load_catalog(server: ServerProcess, agent: AgentProcess, upstream: int, size: int) -> float:
    """Create the catalog and wait until the gateway serves its last API; the seconds that took."""
    started = time.monotonic()
    async with server.client(timeout=60) as north:
        await bounded(north.put(catalog_api(index, upstream)) for index in range(size))
    stored = time.monotonic() - started
    poller = Poller(agent.gateway_port, f"/a{size - 1}{PROBE}")

    async def served() -> bool:
        return await poller.echoed_path() == f"/start{PROBE}"

    await eventually_async(served, timeout=LOAD_TIMEOUT, interval=0.1, what=f"the gateway to serve all {size} APIs")
    poller.close()
    print(f"{size} APIs stored in {stored:.1f}s, served in {time.monotonic() - started:.1f}s", file=sys.stderr)
    return round(time.monotonic() - started, 1)


async def run(sizes: list[int], changes: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="meshplane-bench-") as tmp_dir:
        work = Path(tmp_dir)
        with nginx(work, "$request_uri") as upstream:
            results = [await measure_size(work, size, upstream, changes) for size in sizes]
    smallest, largest = results[0], results[-1]
    measurable = [key for key in GROWING if smallest[key] >= RESOLUTION.get(key, 1.0)]
    growth = {key: ratio(largest[key], smallest[key]) for key in measurable}
    return {
        "benchmark": "incremental",
        "changes_per_size": changes,
        "results": results,
        "growth_largest_to_smallest": growth,
        "below_resolution": [key for key in GROWING if key not in measurable],
        "target_growth": TARGET_GROWTH,
        "met": {key: value is not None and value <= TARGET_GROWTH for key, value in growth.items()},
    }


def main() -> None:
    arguments = parser(__doc__, "10 and 100 APIs, 3 changes: proves the benchmark runs")
    arguments.add_argument("--sizes", default="100,1000,10000", help="catalog sizes, smallest first")
    arguments.add_argument("--changes", type=int, default=5)
    args = arguments.parse_args()
    sizes = [10, 100] if args.quick else [int(size) for size in args.sizes.split(",")]
    started = time.monotonic()
    emit(asyncio.run(run(sizes, 3 if args.quick else args.changes)), started)


if __name__ == "__main__":
    main()
