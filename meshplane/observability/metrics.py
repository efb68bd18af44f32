"""Prometheus metrics of every meshplane process. Labels are bounded: kinds, routes, codes, never object names."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, Histogram, Info, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from meshplane import __version__

BUILD_INFO = Info("meshplane_build", "Version of this meshplane process")
BUILD_INFO.info({"version": __version__})

HTTP_REQUESTS = Counter("meshplane_http_requests_total", "North REST requests", ["method", "route", "code"])
HTTP_LATENCY = Histogram("meshplane_http_request_duration_seconds", "North REST request latency", ["method", "route"])
GRPC_REQUESTS = Counter("meshplane_grpc_requests_total", "gRPC calls answered, by full method name", ["method", "code"])
GRPC_LATENCY = Histogram(
    "meshplane_grpc_request_duration_seconds", "gRPC call latency (of a stream: its whole life)", ["method"]
)
CONNECTED_AGENTS = Gauge("meshplane_connected_agents", "Clusters whose agent holds a sync stream to this server")
CONNECTED_STREAMS = Gauge("meshplane_xds_connected_streams", "Open xDS streams served by this process", ["server"])
PUSHES = Counter("meshplane_xds_pushes_total", "xDS responses sent", ["server", "type"])
PUSHED_RESOURCES = Counter(
    "meshplane_xds_pushed_resources_total", "Resources carried by xDS responses", ["server", "type"]
)
PUSHED_BYTES = Counter(
    "meshplane_xds_pushed_bytes_total", "Encoded bytes of the xDS responses sent", ["server", "type"]
)
PUSH_LATENCY = Histogram(
    "meshplane_xds_push_latency_seconds",
    "From the commit of the oldest change an xDS response carries to the response",
    ["server", "type"],
)
ACKS = Counter("meshplane_xds_acks_total", "xDS ACKs received", ["server", "type"])
NACKS = Counter("meshplane_xds_nacks_total", "xDS NACKs received", ["server", "type"])
LEADER = Gauge("meshplane_leader", "1 on the server replica leading background work (status roll-up, compaction)")
STORE_REVISION = Gauge("meshplane_store_revision", "Latest store revision seen by this server")
STORE_LATENCY = Histogram(
    "meshplane_store_transaction_duration_seconds",
    "Store transactions, queueing for the writer slot included",
    ["operation"],
)
DELIVERY_LAG_REVISIONS = Gauge(
    "meshplane_cluster_delivery_lag_revisions",
    "Store revisions since the oldest change a cluster has not applied (0: it holds everything)",
    ["cluster"],
)
DELIVERY_LAG_SECONDS = Gauge(
    "meshplane_cluster_delivery_lag_seconds", "Age of the oldest change a cluster has not applied", ["cluster"]
)
ROLLOUT_TRANSITIONS = Counter(
    "meshplane_rollout_transitions_total",
    "Rollouts that entered a phase (Paused, Succeeded, RolledBack, ...) or a next wave, by what they entered",
    ["entered"],
)
REPORTS_REFUSED = Counter(
    "meshplane_reports_refused_total",
    "Objects and services a cluster reported that the server refused or left alone, by why "
    "(kind, project, invalid, clash, owned)",
    ["cluster", "reason"],
)
TASK_FAILURES = Counter(
    "meshplane_task_failures_total",
    "Deaths of a process's supervised tasks, restarted or taking the process down, by task",
    ["task"],
)
AGENT_UPDATES = Counter("meshplane_agent_updates_total", "Delta updates the agent received from the server", ["result"])
GATEWAY_PUBLISHES = Counter(
    "meshplane_agent_gateway_publishes_total",
    "Envoy configurations the agent published to its gateways, by how the gateways took them",
    ["state"],
)
RATELIMIT_DECISIONS = Counter(
    "meshplane_ratelimit_decisions_total",
    "Rate-limit requests answered, by domain (`unconfigured` for one no limit names) and overall code",
    ["domain", "code"],
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
ENFORCER_SKIPPED = Counter(
    "meshplane_enforcer_skipped_entries_total",
    "Entries of the agent's updates the enforcer could not use and left out, serving the rest",
    ["type"],
)


def short_type(type_url: str) -> str:
    """`type.googleapis.com/envoy.config.cluster.v3.Cluster` -> `Cluster`: a bounded label value."""
    return type_url.rsplit(".", 1)[-1]


async def metrics_endpoint(request: Request) -> Response:
    """Prometheus' text exposition of every metric of this process."""
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


def metrics_app() -> Starlette:
    """`/metrics` alone: what the enforcer and the rate limiter serve on their metrics address."""
    return Starlette(routes=[Route("/metrics", metrics_endpoint)])
