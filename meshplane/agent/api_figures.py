"""Per-API request, error and latency figures, read from a gateway's Envoy stats.

Each API's routes count under `vhost.<virtual host>.route.api.<project>.<name>.` (see
`translate.telemetry`); an API on several virtual hosts (hostnames) is summed over them. The counts are
of requests the gateway sent upstream, so a 5xx ratio is the backends' (and the gateway's own upstream
failures: no healthy host, timeouts); answers given before a request goes upstream (401, 403, 429,
direct responses) are not in them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import httpx

from meshplane.agent.translate.telemetry import STAT_PREFIX
from meshplane.config import split_address

_API_ROUTE = rf"^vhost\..+\.route\.{STAT_PREFIX}\.(?P<project>[a-z0-9-]+)\.(?P<name>[a-z0-9-]+)\."
_COUNTER = re.compile(_API_ROUTE + r"upstream_rq_(?P<what>total|[1-5]xx)$")
_LATENCY = re.compile(_API_ROUTE + r"upstream_rq_time$")
STATS_FILTER = rf"\.route\.{STAT_PREFIX}\.|^server\.uptime$"
"""The API route counters, and the gateway's uptime: going down, it says the gateway restarted."""
STATS_QUERY = {"format": "json", "filter": STATS_FILTER, "usedonly": ""}
"""Only stats something was counted in: a route no request reached has none to read, so the answer and its
parsing grow with the APIs that take traffic, not with the catalog. At 10,000 APIs a reading without this
is 4.6 MB and 1,000 ms of the gateway's CPU; with it, 260 ms (Envoy still walks every stat it has). An API
absent from a reading has zero figures."""
QUANTILES = {50.0: "p50", 99.0: "p99"}
ADMIN_TIMEOUT = 2.0
"""Seconds a read of Envoy's stats may take: its admin answers from memory."""


@dataclass
class ApiFigures:
    """Since the gateway started: requests sent upstream, by status class, and latency quantiles in ms
    (the worst over the API's virtual hosts; absent until Envoy has flushed its histograms once)."""

    requests: int = 0
    by_class: dict[str, int] = field(default_factory=dict)
    latency_ms: dict[str, float] = field(default_factory=dict)

    @property
    def errors(self) -> int:
        return self.by_class.get("5xx", 0)

    @property
    def error_ratio(self) -> float:
        return self.errors / self.requests if self.requests else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "errors": self.errors,
            "errorRatio": self.error_ratio,
            "byClass": dict(sorted(self.by_class.items())),
            "latencyMs": self.latency_ms,
        }


def api_figures(stats: dict[str, Any]) -> dict[str, ApiFigures]:
    """The figures per API (`project/name`) in Envoy's `/stats?format=json` answer."""
    figures: dict[str, ApiFigures] = {}
    for entry in stats.get("stats", []):
        if "name" in entry:
            _count(figures, entry["name"], entry.get("value", 0))
        elif "histograms" in entry:
            _latencies(figures, entry["histograms"])
    return dict(sorted(figures.items()))


def _count(figures: dict[str, ApiFigures], name: str, value: int) -> None:
    match = _COUNTER.match(name)
    if match is None:
        return
    api = figures.setdefault(f"{match['project']}/{match['name']}", ApiFigures())
    if match["what"] == "total":
        api.requests += value
    else:
        api.by_class[match["what"]] = api.by_class.get(match["what"], 0) + value


def _latencies(figures: dict[str, ApiFigures], histograms: dict[str, Any]) -> None:
    quantiles = histograms.get("supported_quantiles", [])
    for histogram in histograms.get("computed_quantiles", []):
        match = _LATENCY.match(histogram.get("name", ""))
        if match is None:
            continue
        api = figures.setdefault(f"{match['project']}/{match['name']}", ApiFigures())
        for quantile, value in zip(quantiles, histogram.get("values", []), strict=False):
            label = QUANTILES.get(float(quantile))
            cumulative = value.get("cumulative")
            if label is not None and cumulative is not None:
                api.latency_ms[label] = max(api.latency_ms.get(label, 0.0), float(cumulative))


def uptime(stats: dict[str, Any]) -> int:
    """Seconds the gateway has been up, as its last stats flush saw it. Only used stats are read (see
    STATS_QUERY) and Envoy sets its uptime when it flushes them, so a gateway that has not flushed since it
    started has none: it has just started, 0."""
    for entry in stats.get("stats", []):
        if entry.get("name") == "server.uptime":
            return int(entry.get("value", 0))
    return 0


@dataclass(frozen=True)
class GatewayStats:
    """One read of a gateway's stats: its per-API figures, and how long it had been up."""

    figures: dict[str, ApiFigures]
    uptime: int | None


async def read_gateway_stats(envoy_admin: str) -> GatewayStats:
    """The stats of the gateway whose Envoy admin is at `envoy_admin` (host:port); raises httpx.HTTPError
    when they cannot be read."""
    host, port = split_address(envoy_admin)
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    # Envoy's admin speaks plain HTTP to its own agent: no TLS context to build (30 ms of CPU a client) and no
    # proxy from the environment to pass through, on a reading made every few seconds per gateway.
    async with httpx.AsyncClient(timeout=ADMIN_TIMEOUT, verify=False, trust_env=False) as client:
        response = await client.get(f"http://{authority}/stats", params=STATS_QUERY)
        response.raise_for_status()
        stats = response.json()
        return GatewayStats(api_figures(stats), uptime(stats))


async def read_api_figures(envoy_admin: str) -> dict[str, ApiFigures]:
    """The figures of the gateway whose Envoy admin is at `envoy_admin`; raises httpx.HTTPError when they
    cannot be read."""
    return (await read_gateway_stats(envoy_admin)).figures
