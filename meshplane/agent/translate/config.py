"""What the translator is told about the gateway, and the Envoy resources it hands back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import extension_pb2
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_pb2
from envoy.extensions.transport_sockets.tls.v3 import secret_pb2
from google.protobuf.message import Message

from meshplane.agent.translate.targets import BackendPolicy
from meshplane.config import SYSTEM_CA_FILE


@dataclass(frozen=True)
class GatewaySettings:
    """Where the gateway listens and the names its listener and route table go by."""

    listener_address: str = "127.0.0.1"
    listener_port: int = 10000
    listener_name: str = "gateway"
    route_config_name: str = "gateway"
    enforcer_address: str | None = None
    """host:port of the enforcer (ext_authz); None: APIs with opaque keys answer 503 here, unless `keys_filter`."""
    keys_filter: str | None = None
    """The keys filter's .wasm (dataplane/keys-filter) on the gateways' host; set, opaque keys are checked inside
    Envoy against their digests and the enforcer is not asked."""
    ratelimiter_address: str | None = None
    """host:port of the rate limiter; None: global limits are not enforced here (local ones are)."""
    enforcer_fail_open: bool = False
    """Let requests through when the enforcer cannot answer (default: refuse them, 503)."""
    global_limits_by_quota: bool = False
    """Global API-wide and operation limits enforced by quotas the rate limiter assigns each gateway (RLQS, see
    `quotas`) instead of a call per request; per-application ones still ask it per request."""
    ratelimiter_fail_closed: bool = False
    """Refuse requests when the rate limiter cannot answer (default: let them through, Envoy's convention)."""
    cluster_domain: str = "cluster.local"
    """The DNS domain of the cluster's services (`<service>.<namespace>.svc.<domain>`)."""
    jwks_ca_file: str = SYSTEM_CA_FILE
    """CA bundle, on the gateways' hosts, that remote key sets over HTTPS are verified against when the API
    names no CA of its own."""
    xff_num_trusted_hops: int = 0
    """Proxies of the operator's in front of the gateway whose x-forwarded-for entries are trusted."""
    backends: BackendPolicy = field(default_factory=BackendPolicy)
    """What APIs may make the gateway reach here (see `targets`); APIs that ask for more are refused."""
    access_log: str | None = "stdout"
    """Where each gateway writes its JSON access-log lines: "stdout", a file path on its host, or None (off)."""
    access_log_otlp_endpoint: str | None = None
    """host:port of an OTLP gRPC collector the gateways also send access logs to; None: no OTLP."""


@dataclass(frozen=True)
class EnvoyConfig:
    """One snapshot of everything the agent serves over xDS, to its gateways and to proxyless gRPC clients
    alike (each subscribes to what it uses); every list is sorted by resource name."""

    listeners: list[listener_pb2.Listener]
    routes: list[route_pb2.RouteConfiguration]
    clusters: list[cluster_pb2.Cluster]
    endpoints: list[endpoint_pb2.ClusterLoadAssignment]
    refused: dict[str, str] = field(default_factory=dict)
    """APIs left out (`project/name`), each with the reason: what they would make the gateway reach."""
    extension_configs: list[extension_pb2.TypedExtensionConfig] = field(default_factory=list)
    """The configs of the gateway's discovered filters (ECDS): what changes with the catalog, kept out of the
    listener."""
    secrets: list[secret_pb2.Secret] = field(default_factory=list)
    """The certificates and client CAs the Gateways' listeners name, the client certificates and credentials
    backends present: served over SDS only."""
    gateway_problems: dict[str, str] = field(default_factory=dict)
    """Gateways (`project/name`) with a part not served here (a certificate not held), each with why."""
    api_problems: dict[str, str] = field(default_factory=dict)
    """APIs (`project/name`) attached here to some of their routes only, each with which and why (see `attached`)."""
    gateway_api: Mapping[str, Mapping[str, Message]] = field(default_factory=dict)
    """The Gateway API core's resources (type URL -> name -> message), with the checks and limits of the APIs
    attached to its routes (see `attached`): served beside the rest."""
