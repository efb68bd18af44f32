"""What API management costs the request path: wrk through one real Envoy gateway, four configurations;
and what a large catalog costs the gateway's configuration.

(a) a bare route; (b) API key + subscription + local limit, all native (jwt_authn, RBAC,
local_ratelimit); (c) (b) plus a global limit through the rate limiter on Redis; (d) an opaque key
checked by the enforcer (ext_authz). The upstream is nginx answering from memory, so the gateway is
what is measured. Limits are set far above the offered load: every request is checked, none refused.
Prints one JSON object with rps and latency per configuration and the ratio of each to (a).

The config-scale row: `--apis` APIs of ten operations each on one cluster — how long the agent's translator
takes for them (best of three), how many bytes each xDS type carries, and how long the agent's own publisher
(make-before-break, every step acknowledged) takes until a real Envoy holds all of it and the last API answers.

    .venv/bin/python -m bench.dataplane [--seconds 10] [--connections 16] [--apis 1000] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc
import httpx

from bench.common import nginx, wrk
from meshplane.agent.gateway import ENVOY_TYPE_ORDER, GatewayPublisher, gateway_group
from meshplane.agent.translate import GatewaySettings, translate_apis
from meshplane.agent.translate.targets import BackendPolicy
from meshplane.model.registry import REGISTRY
from meshplane.model.status import DeliveryState
from meshplane.xds.cache import ResourceCache
from meshplane.xds.server import XdsServer, add_to_server
from meshplane_testing import documents
from meshplane_testing.envoy import run_envoy
from meshplane_testing.eventually import eventually_async
from meshplane_testing.gateway import Gateway, status
from meshplane_testing.meshplane import run_agent, run_enforcer, run_ratelimiter, run_server
from meshplane_testing.north import put
from meshplane_testing.process import free_port
from meshplane_testing.redis import start_redis

PROJECT = "default"
HIGH = {"requestsPerUnit": 1_000_000_000, "unit": "second"}
CONFIGURATIONS = {
    "bare": ("/bare/x", None),
    "native": ("/native/x", "signed"),
    "native_global": ("/global/x", "signed"),
    "enforcer": ("/opaque/x", "opaque"),
}
FLOOR = "bare"
OPERATIONS_PER_API = 10
TRANSLATIONS = 3


def declare(api: httpx.Client, upstream: int) -> dict[str, str]:
    """The four APIs and a subscribed application; its signed key and an imported opaque key."""
    backend = [documents.backend(upstream)]
    signed = {"apiKey": {"header": "x-api-key"}}
    opaque = {"apiKey": {"header": "x-api-key", "mode": "opaque"}}
    put(api, documents.api("bare", backends=backend))
    put(api, documents.api("native", backends=backend, authentication=signed, rateLimit=HIGH))
    put(api, documents.api("global", backends=backend, authentication=signed, rateLimit={**HIGH, "scope": "global"}))
    put(api, documents.api("opaque", backends=backend, authentication=opaque))
    put(api, documents.application("bench"))
    for target in ("native", "global", "opaque"):
        put(api, documents.subscription(f"bench-{target}", application="bench", api=target))
    keys = {"signed": api.post(f"/v1/projects/{PROJECT}/applications/bench/keys", json={}).json()["key"]}
    keys["opaque"] = secrets.token_urlsafe(32)
    api.post(f"/v1/projects/{PROJECT}/applications/bench/keys", json={"key": keys["opaque"]}).raise_for_status()
    return keys


def run(seconds: int, connections: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="meshplane-bench-") as tmp_dir:
        work = Path(tmp_dir)
        ports = {"enforcer": free_port(), "ratelimiter": free_port()}
        extra = [
            f"--enforcer-address=127.0.0.1:{ports['enforcer']}",
            f"--ratelimiter-address=127.0.0.1:{ports['ratelimiter']}",
        ]
        with (
            nginx(work) as upstream,
            start_redis(work) as redis,
            run_server(work) as server,
            run_agent(work, "bench", server, extra=extra) as agent,
            run_enforcer(work, agent.xds_port, port=ports["enforcer"]),
            run_ratelimiter(work, agent.xds_port, redis.url, port=ports["ratelimiter"]),
            run_envoy(work, "gw-bench", agent.xds_port) as envoy,
            server.http() as api,
        ):
            envoy.wait_listener(agent.gateway_port)
            keys = declare(api, upstream)
            gateway = Gateway(agent.gateway_port)
            results: dict[str, dict[str, float]] = {}
            for name, (path, credential) in CONFIGURATIONS.items():
                headers = {"x-api-key": keys[credential]} if credential else {}
                gateway.wait_for(path, status(200), headers=headers, timeout=30)
                results[name] = wrk(f"http://127.0.0.1:{agent.gateway_port}{path}", headers, seconds, connections)
            gateway.close()
    floor = results[FLOOR]["rps"]
    return {
        "benchmark": "dataplane",
        "seconds": seconds,
        "connections": connections,
        "envoy_concurrency": 1,
        "results": results,
        "ratio_to_bare": {name: round(result["rps"] / floor, 3) for name, result in results.items()},
        "targets": {"native": 0.6, "native_global": 0.25, "enforcer": 0.2},
    }


def catalog(apis: int, upstream: int) -> list[Any]:
    """`apis` APIs of ten operations each (reads and writes of collections and items), as the agent holds them."""
    operations = []
    for index in range(OPERATIONS_PER_API // 2):
        operations += [
            {"method": "GET", "path": f"/r{index}/{{id}}"},
            {"method": "POST" if index % 2 else "PUT", "path": f"/r{index}"},
        ]
    parsed = [
        documents.api(f"a{number:05d}", backends=[documents.backend(upstream)], operations=operations)
        for number in range(apis)
    ]
    return [REGISTRY.parse(document) for document in parsed]


async def config_scale(work: Path, apis: int) -> dict[str, Any]:
    """Translate and publish a catalog of `apis` APIs to one real Envoy through the agent's publisher."""
    with nginx(work) as upstream:
        settings = GatewaySettings(listener_port=free_port(), backends=BackendPolicy(allow_loopback=True))
        resources = catalog(apis, upstream)
        durations = []
        for _ in range(TRANSLATIONS):
            begun = time.perf_counter()
            config = translate_apis(resources, settings)
            durations.append(time.perf_counter() - begun)
        sizes = {
            "lds": sum(m.ByteSize() for m in config.listeners),
            "rds": sum(m.ByteSize() for m in config.routes),
            "cds": sum(m.ByteSize() for m in config.clusters),
            "eds": sum(m.ByteSize() for m in config.endpoints),
        }
        cache = ResourceCache()
        publisher = GatewayPublisher(cache, ack_timeout=120)
        server = grpc.aio.server()
        add_to_server(
            XdsServer(cache, node_group=gateway_group, type_order=ENVOY_TYPE_ORDER, callbacks=publisher, name="scale"),
            server,
        )
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            with run_envoy(work, "gw-scale", port) as envoy:
                # An empty catalog first: the publisher waits only for gateways that hold its listener.
                await eventually_async(lambda: publisher.connected or None, timeout=20, what="the Envoy's ADS stream")
                await publisher.publish(translate_apis([], settings))
                await asyncio.to_thread(envoy.wait_listener, settings.listener_port)
                begun = time.perf_counter()
                outcome = await publisher.publish(config)
                applied = time.perf_counter() - begun
                last = f"http://127.0.0.1:{settings.listener_port}/a{apis - 1:05d}/r0/7"
                async with httpx.AsyncClient(timeout=5) as http:

                    async def answers() -> bool:
                        try:
                            return (await http.get(last)).status_code == 200
                        except httpx.HTTPError:
                            return False

                    await eventually_async(answers, timeout=30, what="the last API through the gateway", interval=0.005)
                served = time.perf_counter() - begun
        finally:
            await server.stop(None)
    return {
        "apis": apis,
        "operations": apis * OPERATIONS_PER_API,
        "translate_ms": round(min(durations) * 1000, 1),
        "bytes": sizes,
        "publish_acked_ms": round(applied * 1000, 1),
        "last_api_served_ms": round(served * 1000, 1),
        "applied": outcome.state is DeliveryState.APPLIED,
        "resources": {
            "listeners": len(config.listeners),
            "routes": len(config.routes),
            "clusters": len(config.clusters),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--apis", type=int, default=1000, help="APIs of ten operations in the config-scale row")
    parser.add_argument("--quick", action="store_true", help="2 s per configuration: proves the benchmark runs")
    args = parser.parse_args()
    started = time.monotonic()
    report = run(2 if args.quick else args.seconds, args.connections)
    with tempfile.TemporaryDirectory(prefix="meshplane-bench-") as tmp_dir:
        report["config_scale"] = asyncio.run(config_scale(Path(tmp_dir), 100 if args.quick else args.apis))
    report["wall_seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
