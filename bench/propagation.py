"""How fast an API change reaches real traffic: a PUT at the REST API until a real Envoy answers with it.

Each change moves the API's backend basePath (`/c<n>`) and the upstream (nginx) answers with the path it
receives, so the
gateway's answer says which change it serves. A raw keep-alive HTTP/1.1 poller asks every millisecond, from
just before the PUT is sent until the first answer that shows the change (the PUTs go over such a connection
too); the server runs on SQLite and on
PostgreSQL, with one agent and one Envoy. The floor, in the same run: a minimal ADS server (meshplane's own
cache and xDS server, nothing else) serving the same translated listener, route and cluster to the same Envoy
binary, where a change replaces only the route in the cache, timed the same way. Prints one JSON object.

    .venv/bin/python -m bench.propagation [--changes 50] [--sqlite | --postgres] [--quick]
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc

from bench.common import (
    add_store_arguments,
    api_path,
    database_url,
    distribution,
    emit,
    nginx,
    parser,
    postgres_for,
    ratio,
    selected_stores,
    server_on,
)
from meshplane.agent.gateway import CLUSTER, ENDPOINT, ENVOY_TYPE_ORDER, GATEWAYS, LISTENER, ROUTE
from meshplane.agent.translate import EnvoyConfig, GatewaySettings, translate_apis
from meshplane.agent.translate.targets import BackendPolicy
from meshplane.model.registry import REGISTRY
from meshplane.xds.cache import ResourceCache
from meshplane.xds.resource import VersionedResource, pack
from meshplane.xds.server import XdsServer, add_to_server
from meshplane_testing.documents import api, backend
from meshplane_testing.envoy import run_envoy
from meshplane_testing.eventually import eventually_async
from meshplane_testing.meshplane import run_agent
from meshplane_testing.postgres import PostgresServer
from meshplane_testing.process import free_port

NAME = "propagation"
BASE_PATH = "/bench"
PROBE = "/p"
WARMUP = 2
"""Changes made and waited for before timing starts: the first ones pay for lazy set-up along the path."""
PAUSE = 0.05
"""Seconds between changes, so that acknowledgements and status reports of one do not overlap the next."""
POLL_INTERVAL = 0.001
CHANGE_TIMEOUT = 30.0
TARGET_RATIO = 2.0
"""Each store's p99 at most this many times the floor's p99."""


def backend_base(change: int | None) -> str:
    """The backend basePath of change `change`; None: the one the API starts with."""
    return "/start" if change is None else f"/c{change}"


class KeepAlive:
    """HTTP/1.1 requests over one keep-alive connection, written and read by hand, so that what the benchmark's
    own client costs (a general client costs a millisecond a request here) stays out of the figures; it
    reconnects when the other side drops the connection."""

    def __init__(self, port: int) -> None:
        self._port = port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def request(self, message: bytes) -> tuple[int, bytes]:
        """Send one whole request; its answer's status and body. OSError, IncompleteReadError or ValueError
        when the connection fails (it is closed then)."""
        try:
            if self._reader is None or self._writer is None:
                self._reader, self._writer = await asyncio.open_connection("127.0.0.1", self._port)
            self._writer.write(message)
            head = await self._reader.readuntil(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            length = None
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if length is None:
                raise ValueError("an answer without Content-Length")  # never from Envoy or the server here
            return int(lines[0].split(b" ", 2)[1]), await self._reader.readexactly(length)
        except (OSError, asyncio.IncompleteReadError, ValueError):
            self.close()
            raise

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


class Poller:
    """GETs one gateway path over one keep-alive connection."""

    def __init__(self, port: int, path: str) -> None:
        self._connection = KeepAlive(port)
        self._request = f"GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n".encode()

    async def echoed_path(self) -> str | None:
        """The path the upstream saw, or None for any other answer (no listener yet, 404, 503...)."""
        try:
            status, body = await self._connection.request(self._request)
        except (OSError, asyncio.IncompleteReadError, ValueError):
            return None
        return body.decode() if status == 200 else None

    async def wait_for(self, path: str) -> None:
        """Poll every POLL_INTERVAL until the upstream sees `path`; TimeoutError after CHANGE_TIMEOUT."""

        async def seen() -> bool:
            return await self.echoed_path() == path

        await eventually_async(seen, timeout=CHANGE_TIMEOUT, interval=POLL_INTERVAL, what=f"the upstream to see {path}")

    def close(self) -> None:
        self._connection.close()


def put_request(path: str, headers: dict[str, str], document: dict[str, Any]) -> bytes:
    """A whole HTTP/1.1 PUT of `document` as JSON."""
    body = json.dumps(document).encode()
    fields = {**headers, "Host": "bench", "Content-Type": "application/json", "Content-Length": str(len(body))}
    head = "".join(f"{name}: {value}\r\n" for name, value in fields.items())
    return f"PUT {path} HTTP/1.1\r\n{head}\r\n".encode() + body


async def time_changes(apply: Callable[[int], Awaitable[None]], poller: Poller, changes: int) -> list[float]:
    """Milliseconds from the start of each change until the gateway serves it; warm-up changes not counted."""
    timings = []
    for change in range(WARMUP + changes):
        started = time.perf_counter()
        await apply(change)
        await poller.wait_for(backend_base(change) + PROBE)
        if change >= WARMUP:
            timings.append((time.perf_counter() - started) * 1000)
        await asyncio.sleep(PAUSE)
    poller.close()
    return timings


async def through_meshplane(
    work: Path, store: str, database: PostgresServer | None, upstream: int, changes: int
) -> dict[str, Any]:
    """Server, agent and Envoy as separate processes; changes by PUT at the north API."""
    put_ms: list[float] = []
    with (
        server_on(work, store, await database_url(store, database)) as server,
        run_agent(work, f"prop-{store}", server) as agent,
        run_envoy(work, f"gw-{store}", agent.xds_port) as envoy,
    ):
        envoy.wait_listener(agent.gateway_port)
        north = KeepAlive(server.http_port)

        async def put(change: int | None) -> None:
            started = time.perf_counter()
            document = api(NAME, basePath=BASE_PATH, backends=[backend(upstream, basePath=backend_base(change))])
            status, answer = await north.request(put_request(api_path(NAME), server.headers, document))
            if status not in (200, 201):
                raise RuntimeError(f"the PUT was answered {status}: {answer.decode(errors='replace')}")
            if change is not None and change >= WARMUP:
                put_ms.append((time.perf_counter() - started) * 1000)

        poller = Poller(agent.gateway_port, BASE_PATH + PROBE)
        try:
            await put(None)
            await poller.wait_for(backend_base(None) + PROBE)
            timings = await time_changes(put, poller, changes)
        finally:
            north.close()
    served_after_response = [total - answered for total, answered in zip(timings, put_ms, strict=True)]
    return {
        "ms": distribution(timings),
        "put_response_ms": distribution(put_ms),
        "served_after_response_ms": distribution(served_after_response),
    }


def envoy_config(upstream: int, settings: GatewaySettings, change: int | None) -> EnvoyConfig:
    """What the agent's translator makes of the benchmark API at one change."""
    document = api(NAME, basePath=BASE_PATH, backends=[backend(upstream, basePath=backend_base(change))])
    return translate_apis([REGISTRY.parse(document)], settings)


def snapshot(config: EnvoyConfig) -> dict[str, dict[str, VersionedResource]]:
    """The config as the agent puts it in its cache: per type URL, packed resources by name."""
    packed = {
        LISTENER: [(m.name, m) for m in config.listeners],
        ROUTE: [(m.name, m) for m in config.routes],
        CLUSTER: [(m.name, m) for m in config.clusters],
        ENDPOINT: [(m.cluster_name, m) for m in config.endpoints],
    }
    return {url: {name: pack(name, message) for name, message in pairs} for url, pairs in packed.items()}


async def floor(work: Path, upstream: int, changes: int) -> dict[str, Any]:
    """The same Envoy fed by a bare ResourceCache + XdsServer in this process; a change swaps only the route."""
    # The benchmark's upstream listens on loopback, as the harness's agent allows.
    settings = GatewaySettings(listener_port=free_port(), backends=BackendPolicy(allow_loopback=True))
    initial = snapshot(envoy_config(upstream, settings, None))
    routes = [
        snapshot(envoy_config(upstream, settings, change))[ROUTE][settings.route_config_name]
        for change in range(WARMUP + changes)
    ]
    cache = ResourceCache()
    cache.set_snapshot(GATEWAYS, initial)
    server = grpc.aio.server()
    xds = XdsServer(cache, node_group=lambda node, context: GATEWAYS, type_order=ENVOY_TYPE_ORDER, name="floor")
    add_to_server(xds, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        with run_envoy(work, "gw-floor", port):

            async def swap_route(change: int) -> None:
                cache.update(GATEWAYS, ROUTE, [routes[change]])

            poller = Poller(settings.listener_port, BASE_PATH + PROBE)
            await poller.wait_for(backend_base(None) + PROBE)
            timings = await time_changes(swap_route, poller, changes)
    finally:
        await server.stop(None)
    return {"ms": distribution(timings)}


async def run(stores: list[str], changes: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="meshplane-bench-") as tmp_dir:
        work = Path(tmp_dir)
        with nginx(work, "$request_uri") as upstream, postgres_for(work, stores) as database:
            bare = await floor(work, upstream, changes)
            results = {store: await through_meshplane(work, store, database, upstream, changes) for store in stores}
    return {
        "benchmark": "propagation",
        "changes": changes,
        "poll_interval_ms": POLL_INTERVAL * 1000,
        "results": results,
        "floor": bare,
        "ratio_to_floor": {
            store: {q: ratio(results[store]["ms"][q], bare["ms"][q]) for q in ("p50", "p99")} for store in stores
        },
        "target_ratio_p99": TARGET_RATIO,
        "met": {store: results[store]["ms"]["p99"] <= TARGET_RATIO * bare["ms"]["p99"] for store in stores},
    }


def main() -> None:
    arguments = parser(__doc__, "10 changes: proves the benchmark runs")
    arguments.add_argument("--changes", type=int, default=50)
    add_store_arguments(arguments)
    args = arguments.parse_args()
    started = time.monotonic()
    emit(asyncio.run(run(selected_stores(args), 10 if args.quick else args.changes)), started)


if __name__ == "__main__":
    main()
