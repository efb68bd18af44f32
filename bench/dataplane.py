"""What API management costs the request path: wrk through real Envoy gateways, six configurations;
and what a large catalog costs the gateway's configuration.

(a) a bare route; (b) API key + subscription + local limit, all native (jwt_authn, RBAC,
local_ratelimit); (c) (b) plus a global limit through the rate limiter on Redis; (d) an opaque key
checked by the enforcer (ext_authz); (e) the same opaque key checked inside Envoy by the keys filter
(proxy-wasm), on a second cluster's gateway whose agent has the filter and no enforcer; (f) (c) with the
global limit enforced by quota (`--global-limits quota`, RLQS), on a third cluster's gateway. The upstream
is nginx answering from memory, so the gateway is what is measured. Limits are set far above the offered
load: every request is checked, none refused.

The overshoot row: wrk through two quota gateways at once (two clusters, their rate limiters on one Redis)
at an API limited to SHARED_LIMIT requests a minute, inside one minute: how many more than the limit the
two let through, and how many fewer (refused early).
Prints one JSON object with rps and latency per configuration and the ratio of each to (a); (e) needs
scripts/build-keys-filter to have run.

The HTTPS rows, on one HTTPS Gateway listener terminating TLS for `localhost` (wrk sends the URL's host as
SNI): a bare route, the floor (Envoy terminating TLS and nothing else), and a signed API key + subscription;
the ratio of the second to the first, against its target.

The config-scale row: `--apis` APIs of ten operations each on one cluster — how long the agent's translator
takes for them (best of three), how many bytes each xDS type carries, and how long the agent's own publisher
(make-before-break, every step acknowledged) takes until a real Envoy holds all of it and the last API answers.
A second figure is the same catalog with API-key authentication and a subscription to each API, so that
every route carries its own RBAC; its last API answers a signed key.

    .venv/bin/python -m bench.dataplane [--seconds 10] [--connections 16] [--apis 1000] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import secrets
import ssl
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc
import httpx
from cryptography.hazmat.primitives.asymmetric import ec

from bench.common import nginx, wrk
from meshplane.agent.gateway import ENVOY_TYPE_ORDER, GatewayPublisher, gateway_group
from meshplane.agent.translate import GatewaySettings, translate_apis
from meshplane.agent.translate.entitlements import Entitlements
from meshplane.agent.translate.targets import BackendPolicy
from meshplane.dataplane import KEY_APPLICATION_UID_CLAIM
from meshplane.model.registry import REGISTRY
from meshplane.model.resource import Resource
from meshplane.model.status import DeliveryState
from meshplane.security.ca import create_ca, issue_server_certificate
from meshplane.server.signing import ISSUER, KEY_SET, SigningKey
from meshplane.xds.cache import ResourceCache
from meshplane.xds.server import XdsServer, add_to_server
from meshplane_testing import documents
from meshplane_testing.envoy import run_envoy
from meshplane_testing.eventually import eventually_async
from meshplane_testing.gateway import Gateway, status
from meshplane_testing.keys_filter import keys_filter_wasm
from meshplane_testing.meshplane import ServerProcess, run_agent, run_enforcer, run_ratelimiter, run_server
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
KEYS_FILTER_CONFIGURATIONS = {"keys_filter": ("/opaque/x", "opaque")}
KEYS_FILTER_TARGET = 0.6
QUOTA_CONFIGURATIONS = {"native_global_quota": ("/global/x", "signed")}
QUOTA_TARGET = 0.6
SHARED_LIMIT = 2_000
"""Requests a minute the overshoot row's API allows across its two gateways (far fewer than wrk sends)."""
FLOOR = "bare"
HTTPS_HOST = "localhost"
"""The name the HTTPS listener's certificate and hostname carry: it resolves to loopback, and wrk sends it as SNI."""
HTTPS_CONFIGURATIONS = {
    "bare": ("/tls-bare/x", None),
    "native": ("/tls-keyed/x", "signed"),
}
HTTPS_TARGET = 0.6
SIGNED = {"apiKey": {"header": "x-api-key"}}
OPERATIONS_PER_API = 10
TRANSLATIONS = 3


def declare(api: httpx.Client, upstream: int) -> dict[str, str]:
    """The four APIs and a subscribed application; its signed key and an imported opaque key."""
    backend = [documents.backend(upstream)]
    signed = SIGNED
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


def declare_https(api: httpx.Client, upstream: int) -> tuple[int, ssl.SSLContext]:
    """An HTTPS Gateway listener for `localhost` and two APIs on it: one bare, one behind a signed key that
    the application `bench` (see `declare`) is subscribed to; the listener's port and a client context
    that trusts its certificate."""
    authority = create_ca()
    served = issue_server_certificate(authority, [HTTPS_HOST])
    certificate = {"certificate": served.certificate_pem().decode(), "privateKey": served.key_pem().decode()}
    put(api, documents.document("TLSCertificate", "bench-tls", spec=certificate))
    port = free_port()
    listener = {
        "name": "web",
        "port": port,
        "protocol": "HTTPS",
        "hostnames": [HTTPS_HOST],
        "tls": {"certificateRefs": ["bench-tls"]},
    }
    put(api, documents.document("Gateway", "bench-https", spec={"listeners": [listener]}))
    backend = [documents.backend(upstream)]
    put(api, documents.api("tls-bare", backends=backend, gateways=["bench-https"]))
    put(api, documents.api("tls-keyed", backends=backend, gateways=["bench-https"], authentication=SIGNED))
    put(api, documents.subscription("bench-tls-keyed", application="bench", api="tls-keyed"))
    return port, ssl.create_default_context(cadata=authority.certificate_pem().decode())


def run(seconds: int, connections: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="meshplane-bench-") as tmp_dir:
        work = Path(tmp_dir)
        ports = {"enforcer": free_port(), "ratelimiter": free_port()}
        checking_inside = ["--keys-filter", str(keys_filter_wasm())]
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
            run_agent(work, "bench-keys", server, extra=checking_inside) as inside,
            run_envoy(work, "gw-bench-keys", inside.xds_port) as inside_envoy,
            quota_gateway(work, "bench-quota-a", server, redis.url) as quota_a,
            quota_gateway(work, "bench-quota-b", server, redis.url) as quota_b,
            server.http() as api,
        ):
            envoy.wait_listener(agent.gateway_port)
            keys = declare(api, upstream)
            https_port, trust = declare_https(api, upstream)
            plain = Gateway(agent.gateway_port)
            results = measure(plain, CONFIGURATIONS, keys, seconds, connections)
            plain.close()
            inside_envoy.wait_listener(inside.gateway_port)
            filtered = Gateway(inside.gateway_port)
            results |= measure(filtered, KEYS_FILTER_CONFIGURATIONS, keys, seconds, connections)
            filtered.close()
            by_quota = Gateway(quota_a)
            results |= measure(by_quota, QUOTA_CONFIGURATIONS, keys, seconds, connections)
            by_quota.close()
            overshoot = quota_overshoot(api, upstream, [quota_a, quota_b], seconds, connections)
            envoy.wait_listener(https_port, timeout=30)
            tls = Gateway(https_port, host=HTTPS_HOST, tls=trust)
            https = measure(tls, HTTPS_CONFIGURATIONS, keys, seconds, connections)
            keyless = tls.request("GET", HTTPS_CONFIGURATIONS["native"][0]).status_code
            tls.close()
    floor = results[FLOOR]["rps"]
    https_ratio = round(https["native"]["rps"] / https["bare"]["rps"], 3)
    return {
        "benchmark": "dataplane",
        "seconds": seconds,
        "connections": connections,
        "envoy_concurrency": 1,
        "results": results,
        "ratio_to_bare": {name: round(result["rps"] / floor, 3) for name, result in results.items()},
        "targets": {
            "native": 0.6,
            "native_global": 0.25,
            "enforcer": 0.2,
            "keys_filter": KEYS_FILTER_TARGET,
            "native_global_quota": QUOTA_TARGET,
        },
        "keys_filter_met": results["keys_filter"]["rps"] / floor >= KEYS_FILTER_TARGET,
        "native_global_quota_met": results["native_global_quota"]["rps"] / floor >= QUOTA_TARGET,
        "quota_overshoot": overshoot,
        "https": {
            "host": HTTPS_HOST,
            "results": https,
            "ratio_native_to_bare": https_ratio,
            "target": HTTPS_TARGET,
            "met": https_ratio >= HTTPS_TARGET,
            "native_without_key_status": keyless,
        },
    }


@contextlib.contextmanager
def quota_gateway(work: Path, cluster: str, server: ServerProcess, redis_url: str) -> Iterator[int]:
    """A cluster whose agent enforces global limits by quota, with its rate limiter on the shared Redis and
    one Envoy: its gateway's port."""
    port = free_port()
    extra = ["--global-limits=quota", f"--ratelimiter-address=127.0.0.1:{port}"]
    with (
        run_agent(work, cluster, server, extra=extra) as agent,
        run_ratelimiter(work, agent.xds_port, redis_url, name=f"ratelimiter-{cluster}", port=port),
        run_envoy(work, f"gw-{cluster}", agent.xds_port) as envoy,
    ):
        envoy.wait_listener(agent.gateway_port)
        yield agent.gateway_port


def quota_overshoot(
    api: httpx.Client, upstream: int, gateway_ports: list[int], seconds: int, connections: int
) -> dict[str, Any]:
    """wrk through both quota gateways at once at one API limited to SHARED_LIMIT a minute, inside one minute:
    how many were let through against the limit (above it: the overshoot; below: refused early)."""
    put(
        api,
        documents.api(
            "shared",
            backends=[documents.backend(upstream)],
            rateLimit={"requestsPerUnit": SHARED_LIMIT, "unit": "minute", "scope": "global"},
        ),
    )
    gateways = [Gateway(port) for port in gateway_ports]
    if time.time() % 60 > 60 - seconds - 10:  # one window for all of it
        time.sleep(60.5 - time.time() % 60)
    for gateway in gateways:  # each gateway's first request, let through before its first grant
        gateway.wait_for("/shared/x", status(200), timeout=30)
    time.sleep(0.5)
    with ThreadPoolExecutor(len(gateways)) as pool:
        runs = list(pool.map(lambda g: wrk(str(g.http.base_url.join("/shared/x")), {}, seconds, connections), gateways))
    for gateway in gateways:
        gateway.close()
    let_through = [int(run["requests"] - run["non_2xx"]) + 1 for run in runs]
    allowed = sum(let_through)
    return {
        "limit_per_minute": SHARED_LIMIT,
        "gateways": len(gateways),
        "requests": sum(int(run["requests"]) for run in runs) + len(gateways),
        "let_through": let_through,
        "overshoot": max(0, allowed - SHARED_LIMIT),
        "refused_early": max(0, SHARED_LIMIT - allowed),
        "overshoot_ratio": round(max(0, allowed - SHARED_LIMIT) / SHARED_LIMIT, 4),
    }


def measure(
    gateway: Gateway,
    configurations: dict[str, tuple[str, str | None]],
    keys: dict[str, str],
    seconds: int,
    connections: int,
) -> dict[str, dict[str, float]]:
    """wrk at each configuration's path through `gateway` (its scheme and host), once it answers 200."""
    results = {}
    for name, (path, credential) in configurations.items():
        headers = {"x-api-key": keys[credential]} if credential else {}
        gateway.wait_for(path, status(200), headers=headers, timeout=30)
        results[name] = wrk(str(gateway.http.base_url.join(path)), headers, seconds, connections)
    return results


def catalog(apis: int, upstream: int, **spec: Any) -> list[Resource]:
    """`apis` APIs of ten operations each (reads and writes of collections and items), as the agent holds them."""
    operations = []
    for index in range(OPERATIONS_PER_API // 2):
        operations += [
            {"method": "GET", "path": f"/r{index}/{{id}}"},
            {"method": "POST" if index % 2 else "PUT", "path": f"/r{index}"},
        ]
    parsed = [
        documents.api(f"a{number:05d}", backends=[documents.backend(upstream)], operations=operations, **spec)
        for number in range(apis)
    ]
    return [REGISTRY.parse(document) for document in parsed]


def subscribed(apis: Iterable[Resource], signer: SigningKey) -> tuple[Entitlements, dict[str, str]]:
    """One application subscribed to each of `apis`, the key set `signer` belongs to, and the header of a key
    it signed for that application (as the server issues one)."""
    uid = "uid-bench"
    application = documents.application("bench")
    application["metadata"]["uid"] = uid
    key_set = documents.document("KeySet", KEY_SET, spec={"issuer": ISSUER, "keys": [signer.jwk()]})
    grants = [
        documents.subscription(f"bench-{api.metadata.name}", application="bench", api=api.metadata.name) for api in apis
    ]
    held = [REGISTRY.parse(document) for document in (application, key_set, *grants)]
    claims = {"iss": ISSUER, "sub": f"{PROJECT}/bench", "app": "bench", KEY_APPLICATION_UID_CLAIM: uid}
    claims |= {"project": PROJECT, "jti": "k-bench", "iat": int(time.time())}
    return Entitlements.of(held), {"x-api-key": signer.sign(claims)}


async def config_scale(work: Path, apis: int, authenticated: bool = False) -> dict[str, Any]:
    """Translate and publish a catalog of `apis` APIs to one real Envoy through the agent's publisher;
    `authenticated`: each behind a signed API key, with a subscription to it."""
    with nginx(work) as upstream:
        settings = GatewaySettings(listener_port=free_port(), backends=BackendPolicy(allow_loopback=True))
        entitlements, headers, now = None, {}, None
        if authenticated:
            resources = catalog(apis, upstream, authentication=SIGNED)
            entitlements, headers = subscribed(resources, SigningKey("bench", ec.generate_private_key(ec.SECP256R1())))
            now = time.time()
        else:
            resources = catalog(apis, upstream)
        durations = []
        for _ in range(TRANSLATIONS):
            begun = time.perf_counter()
            config = translate_apis(resources, settings, entitlements, now)
            durations.append(time.perf_counter() - begun)
        sizes = {
            "lds": sum(m.ByteSize() for m in config.listeners),
            "rds": sum(m.ByteSize() for m in config.routes),
            "cds": sum(m.ByteSize() for m in config.clusters),
            "eds": sum(m.ByteSize() for m in config.endpoints),
        }
        if authenticated:
            sizes["ecds"] = sum(m.ByteSize() for m in config.extension_configs)
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
                            return (await http.get(last, headers=headers)).status_code == 200
                        except httpx.HTTPError:
                            return False

                    await eventually_async(answers, timeout=30, what="the last API through the gateway", interval=0.005)
                served = time.perf_counter() - begun
        finally:
            await server.stop(None)
    return {
        "apis": apis,
        "operations": apis * OPERATIONS_PER_API,
        **({"authentication": "signed API key, one subscription per API"} if authenticated else {}),
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
        apis = 100 if args.quick else args.apis
        report["config_scale"] = asyncio.run(config_scale(Path(tmp_dir), apis))
        report["config_scale_authenticated"] = asyncio.run(config_scale(Path(tmp_dir), apis, authenticated=True))
    report["wall_seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
