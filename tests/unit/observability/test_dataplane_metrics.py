"""The enforcer's and rate limiter's metrics: decisions by domain, and /metrics where asked for."""

from __future__ import annotations

import asyncio
import contextlib
import urllib.request

from meshplane.lifecycle import HttpServer
from meshplane.observability.metrics import metrics_app
from meshplane.proto.v1 import rls_conf_pb2
from meshplane.ratelimiter.service import UNCONFIGURED
from meshplane_testing.process import free_port, port_open
from meshplane_testing.ratelimit_factories import Limiter, config, node, policy, request

from .support import sample

ORDERS = [("api", "orders")]


def decisions(domain: str, code: str) -> float:
    return sample("meshplane_ratelimit_decisions_total", domain=domain, code=code)


async def test_rate_limit_decisions_carry_their_configured_domain() -> None:
    limiter = await Limiter().load(config("metrics-shop", node("api", "orders", policy(1, rls_conf_pb2.HOUR))))
    before = {
        (domain, code): decisions(domain, code)
        for domain, code in (("metrics-shop", "OK"), ("metrics-shop", "OVER_LIMIT"), (UNCONFIGURED, "OK"))
    }

    for _ in range(2):
        await limiter.ask(request("metrics-shop", ORDERS))
    await limiter.ask(request("made-up-by-a-caller", ORDERS))

    assert {key: decisions(*key) - count for key, count in before.items()} == {
        ("metrics-shop", "OK"): 1,
        ("metrics-shop", "OVER_LIMIT"): 1,
        (UNCONFIGURED, "OK"): 1,
    }
    assert decisions("made-up-by-a-caller", "OK") == 0


async def test_metrics_are_served_on_the_address_given_and_only_while_running() -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"

    serving = asyncio.create_task(HttpServer(metrics_app(), f"127.0.0.1:{port}", what="metrics").serve())
    try:
        await asyncio.sleep(0)  # bound and listening from its first step: the request waits for it to answer
        body = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read().decode())
    finally:
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving

    assert "meshplane_build_info" in body
    assert "process_cpu_seconds_total" in body
    assert not port_open(port)
