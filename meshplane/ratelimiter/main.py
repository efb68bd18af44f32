"""The rate-limiter process: RateLimitService on gRPC, its limits fed by the local agent over delta ADS."""

from __future__ import annotations

import asyncio

import grpc
from envoy.config.core.v3.base_pb2 import Node

from meshplane.callout_server import CalloutServer, serve_fed_callouts
from meshplane.dataplane import RATELIMIT_CONFIG_TYPE, RATELIMITER_NODE_CLUSTER
from meshplane.observability.logging import get_logger
from meshplane.ratelimiter.counters import Counters
from meshplane.ratelimiter.memory import MemoryCounters
from meshplane.ratelimiter.quota_service import QuotaService
from meshplane.ratelimiter.redis_counters import RedisCounters
from meshplane.ratelimiter.service import RateLimitService
from meshplane.ratelimiter.settings import RateLimiterSettings, redacted
from meshplane.ratelimiter.table import LimitTable
from meshplane.xds.client import RECONNECT_CHANNEL_OPTIONS, DeltaClient

log = get_logger("meshplane.ratelimiter")

STOP_GRACE = 2.0
"""Seconds in-flight calls get to finish on SIGTERM."""


def open_counters(settings: RateLimiterSettings) -> Counters:
    if settings.redis_url is None:
        return MemoryCounters()
    return RedisCounters(settings.redis_url, settings.redis_timeout)


async def run_ratelimiter(settings: RateLimiterSettings, stop: asyncio.Event) -> None:
    """Serve until `stop` is set; the last configuration the agent sent stays in force while it is away."""
    table = LimitTable()
    counters = open_counters(settings)
    server = CalloutServer([*RateLimitService(table, counters).methods(), *QuotaService(table, counters).methods()])
    client = DeltaClient(
        # A fresh channel per attempt: no gRPC reconnect backoff stacked on the client's own.
        lambda: grpc.aio.insecure_channel(settings.xds_address, options=RECONNECT_CHANNEL_OPTIONS),
        Node(id=settings.node_id, cluster=RATELIMITER_NODE_CLUSTER),
        [RATELIMIT_CONFIG_TYPE],
        initial_versions=table.versions,
        on_update=table.apply,
    )
    log.info(
        "rate limiter serving",
        grpc=settings.grpc_address,
        xds=settings.xds_address,
        node=settings.node_id,
        counters=redacted(settings.redis_url) if settings.redis_url else "memory",
        metrics=settings.metrics_address,
    )
    try:
        await serve_fed_callouts(
            "ratelimiter", server, settings.grpc_address, client, settings.metrics_address, stop, STOP_GRACE
        )
    finally:
        log.info("rate limiter stopping")
        await counters.close()
