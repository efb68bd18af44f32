"""Prometheus metrics of every meshplane process. Labels are bounded: kinds, routes, codes, never object names."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from prometheus_client import Counter, Gauge, Histogram, Info, start_http_server

from meshplane import __version__

BUILD_INFO = Info("meshplane_build", "Version of this meshplane process")
BUILD_INFO.info({"version": __version__})

HTTP_REQUESTS = Counter("meshplane_http_requests_total", "North REST requests", ["method", "route", "code"])
HTTP_LATENCY = Histogram("meshplane_http_request_duration_seconds", "North REST request latency", ["method", "route"])
CONNECTED_STREAMS = Gauge("meshplane_xds_connected_streams", "Open xDS streams served by this process", ["server"])
PUSHES = Counter("meshplane_xds_pushes_total", "xDS responses sent", ["server", "type"])
PUSHED_RESOURCES = Counter(
    "meshplane_xds_pushed_resources_total", "Resources carried by xDS responses", ["server", "type"]
)
ACKS = Counter("meshplane_xds_acks_total", "xDS ACKs received", ["server", "type"])
NACKS = Counter("meshplane_xds_nacks_total", "xDS NACKs received", ["server", "type"])
STORE_REVISION = Gauge("meshplane_store_revision", "Latest store revision seen by this server")
AGENT_UPDATES = Counter("meshplane_agent_updates_total", "Delta updates the agent received from the server", ["result"])
GATEWAY_PUBLISHES = Counter(
    "meshplane_agent_gateway_publishes_total", "Envoy configurations the agent published to its gateways"
)
RATELIMIT_DECISIONS = Counter(
    "meshplane_ratelimit_decisions_total", "Rate-limit requests answered, by overall code", ["code"]
)
RATELIMIT_SHADOWED = Counter(
    "meshplane_ratelimit_shadow_over_limit_total", "Descriptors over a shadow-mode limit, let through"
)
RATELIMIT_CONFIG_UPDATES = Counter(
    "meshplane_ratelimit_config_updates_total", "Rate-limit configuration updates from the agent", ["result"]
)
ENFORCER_DECISIONS = Counter(
    "meshplane_enforcer_decisions_total", "ext_authz answers of the enforcer: allowed, or why not", ["decision"]
)
ENFORCER_UPDATES = Counter(
    "meshplane_enforcer_config_updates_total", "xDS updates the enforcer took from its agent", ["type", "result"]
)


def short_type(type_url: str) -> str:
    """`type.googleapis.com/envoy.config.cluster.v3.Cluster` -> `Cluster`: a bounded label value."""
    return type_url.rsplit(".", 1)[-1]


@contextlib.contextmanager
def serving_metrics(address: str | None, grace: float = 1.0) -> Iterator[None]:
    """Prometheus /metrics on `address` (host:port) while the block runs; nothing when None."""
    if address is None:
        yield
        return
    host, _, port = address.rpartition(":")
    server, thread = start_http_server(int(port), addr=host.strip("[]"))
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=grace)
