"""The specs of logical clouds and traffic intents (service-to-service, external, user-facing)."""

from __future__ import annotations

import ipaddress
import re
from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, Field, model_validator

from meshplane.model.base import WireModel
from meshplane.model.durations import Duration
from meshplane.model.kinds import Hostname, HttpMethod, Port
from meshplane.model.meta import LabelSelector, Name, Placement


def _check_cidr(value: str) -> str:
    try:
        ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address or CIDR block") from None
    return value


def _check_address(value: str) -> str:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address") from None
    return value


Cidr = Annotated[str, AfterValidator(_check_cidr)]
IpAddress = Annotated[str, AfterValidator(_check_address)]


class CloudCluster(WireModel):
    name: Name
    namespace: Name


class LogicalCloudSpec(WireModel):
    """A named set of clusters and the namespace used in each; a cluster may be in several."""

    clusters: list[CloudCluster] = Field(default_factory=list)
    cluster_selector: LabelSelector | None = None
    namespace: Name | None = None
    """The namespace in the clusters the selector picks."""

    @model_validator(mode="after")
    def _one_way_to_choose(self) -> LogicalCloudSpec:
        if not self.clusters and self.cluster_selector is None:
            raise ValueError("name clusters, or give a clusterSelector with a namespace")
        if self.cluster_selector is not None and self.namespace is None:
            raise ValueError("a clusterSelector needs the namespace to use in the clusters it selects")
        names = [c.name for c in self.clusters]
        if len(names) != len(set(names)):
            raise ValueError("clusters: a cluster is listed twice")
        return self


class ServiceProtocol(StrEnum):
    HTTP = "HTTP"
    HTTP2 = "HTTP2"
    GRPC = "GRPC"
    TCP = "TCP"
    TLS = "TLS"

    @property
    def is_http(self) -> bool:
        return self in (ServiceProtocol.HTTP, ServiceProtocol.HTTP2, ServiceProtocol.GRPC)


class MtlsMode(StrEnum):
    STRICT = "STRICT"
    PERMISSIVE = "PERMISSIVE"
    DISABLE = "DISABLE"


class LoadBalancer(StrEnum):
    ROUND_ROBIN = "ROUND_ROBIN"
    LEAST_REQUEST = "LEAST_REQUEST"
    RANDOM = "RANDOM"


class Action(StrEnum):
    ALLOW = "ALLOW"
    DENY = "DENY"


class ServerService(WireModel):
    name: Name
    app: Name | None = None
    """The pods' `app` label; defaults to the service name."""
    port: Port
    protocol: ServiceProtocol = ServiceProtocol.HTTP


class IntentRetries(WireModel):
    attempts: int = Field(ge=1, le=10)
    per_try_timeout: Duration | None = None


class CircuitBreaker(WireModel):
    max_connections: int | None = Field(default=None, ge=1)
    max_pending_requests: int | None = Field(default=None, ge=1)
    consecutive_errors: int | None = Field(default=None, ge=1)
    interval: Duration | None = None
    base_ejection_time: Duration | None = None


class TrafficPolicy(WireModel):
    load_balancer: LoadBalancer = LoadBalancer.ROUND_ROBIN
    locality_failover: bool = False
    timeout: Duration | None = None
    retries: IntentRetries | None = None
    circuit_breaker: CircuitBreaker | None = None


class ClientService(WireModel):
    """A workload identity: the service account of a service in a namespace of a logical cloud."""

    name: Name
    service_account: Name | None = None
    """Defaults to the service name."""
    namespace: Name | None = None
    """Defaults to the logical cloud's namespace in each cluster."""
    logical_cloud: Name | None = None
    """Defaults to the server's logical cloud."""


class AccessRule(WireModel):
    """RBAC and ABAC on requests: every given condition must hold for the rule to apply."""

    action: Action = Action.ALLOW
    methods: list[HttpMethod] = Field(default_factory=list)
    paths: list[str] = Field(default_factory=list)
    headers: dict[str, str] = Field(default_factory=dict)
    jwt_claims: dict[str, str] = Field(default_factory=dict)


class IntentClient(WireModel):
    service: ClientService | None = None
    cidrs: list[Cidr] = Field(default_factory=list)
    access: list[AccessRule] = Field(default_factory=lambda: [AccessRule()])

    @model_validator(mode="after")
    def _who(self) -> IntentClient:
        if self.service is None and not self.cidrs:
            raise ValueError("a client is a service or a set of cidrs")
        return self


class ServiceIntentSpec(WireModel):
    """Who may call a service, how, and where its replicas run."""

    service: ServerService
    placement: Placement = Field(default_factory=Placement)
    mtls: MtlsMode = MtlsMode.STRICT
    traffic_policy: TrafficPolicy = Field(default_factory=TrafficPolicy)
    clients: list[IntentClient] = Field(default_factory=list)

    @model_validator(mode="after")
    def _http_rules_need_http(self) -> ServiceIntentSpec:
        if not self.service.protocol.is_http:
            for index, client in enumerate(self.clients):
                for rule in client.access:
                    if rule.methods or rule.paths or rule.headers or rule.jwt_claims:
                        raise ValueError(
                            f"clients[{index}]: methods, paths, headers and JWT claims need an HTTP protocol, "
                            f"not {self.service.protocol.value}"
                        )
        return self


class Resolution(StrEnum):
    DNS = "DNS"
    STATIC = "STATIC"
    NONE = "NONE"


class EgressPort(WireModel):
    number: Port
    protocol: ServiceProtocol = ServiceProtocol.TLS
    name: Name | None = None


class EgressProxy(WireModel):
    address: str = Field(min_length=1)
    port: Port


class EgressVia(StrEnum):
    DIRECT = "direct"
    EGRESS_GATEWAY = "egressGateway"
    PROXY = "proxy"


class EgressRoute(WireModel):
    via: EgressVia = EgressVia.DIRECT
    proxy: EgressProxy | None = None

    @model_validator(mode="after")
    def _proxy_when_via_proxy(self) -> EgressRoute:
        if (self.via is EgressVia.PROXY) != (self.proxy is not None):
            raise ValueError("proxy: give it exactly when via is proxy")
        return self


class EgressClient(WireModel):
    service: ClientService


class EgressIntentSpec(WireModel):
    """An external application: where it is, how to reach it, and who may."""

    hosts: list[Hostname] = Field(default_factory=list)
    addresses: list[IpAddress] = Field(default_factory=list)
    ports: list[EgressPort] = Field(min_length=1)
    resolution: Resolution = Resolution.DNS
    route: EgressRoute = Field(default_factory=EgressRoute)
    clients: list[EgressClient] = Field(default_factory=list)
    placement: Placement = Field(default_factory=Placement)

    @model_validator(mode="after")
    def _reachable(self) -> EgressIntentSpec:
        if not self.hosts and not self.addresses:
            raise ValueError("hosts or addresses: an external application needs at least one")
        if self.resolution is Resolution.STATIC and not self.addresses:
            raise ValueError("resolution STATIC needs addresses")
        if self.resolution is Resolution.DNS and not self.hosts:
            raise ValueError("resolution DNS needs hosts")
        if any(h.startswith("*") for h in self.hosts) and self.resolution is Resolution.DNS:
            raise ValueError("a wildcard host cannot be resolved by DNS: use resolution NONE")
        return self


class DnsTarget(WireModel):
    server: Name
    zone: str = Field(min_length=1)


class TlsMode(StrEnum):
    SIMPLE = "SIMPLE"
    MUTUAL = "MUTUAL"
    PASSTHROUGH = "PASSTHROUGH"


CREDENTIAL_NAMESPACE = "istio-system"
"""Where the ingress gateway runs, and so where its TLS Secrets must be: istiod serves a gateway only
Secrets of the gateway's own namespace."""
_SECRET_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _check_credential_name(value: str | None) -> str | None:
    if value is not None and (len(value) > 253 or not _SECRET_NAME.match(value)):
        raise ValueError(
            f"{value!r} is not a Secret name: give the bare name of a Secret in {CREDENTIAL_NAMESPACE}, "
            "the ingress gateway's namespace, in every cluster of the intent (istiod reads no other namespace)"
        )
    return value


class EntityTls(WireModel):
    mode: TlsMode = TlsMode.SIMPLE
    credential_name: Annotated[str | None, AfterValidator(_check_credential_name)] = Field(
        default=None,
        description=(
            f"The name of a kubernetes.io/tls Secret in {CREDENTIAL_NAMESPACE}, where the ingress gateway runs, "
            "in every cluster the intent applies to - not the intent's namespace: istiod serves a gateway only "
            "Secrets of its own namespace. For MUTUAL, the client CA is the Secret's ca.crt or a Secret "
            "'<name>-cacert' beside it."
        ),
    )

    @model_validator(mode="after")
    def _credential(self) -> EntityTls:
        if self.mode is not TlsMode.PASSTHROUGH and not self.credential_name:
            raise ValueError(f"credentialName is needed for TLS mode {self.mode.value}")
        return self


class Entity(WireModel):
    """A user-facing entry point: one gateway."""

    name: Name
    tls: EntityTls | None = None


class RouteMatch(WireModel):
    prefix: str | None = None
    exact: str | None = None

    @model_validator(mode="after")
    def _one(self) -> RouteMatch:
        if (self.prefix is None) == (self.exact is None):
            raise ValueError("give exactly one of prefix and exact")
        return self


class RouteTarget(WireModel):
    service: Name
    port: Port
    weight: int = Field(default=100, ge=0, le=100)


class IngressRoute(WireModel):
    match: RouteMatch
    to: RouteTarget | None = None
    split: list[RouteTarget] = Field(default_factory=list)

    @model_validator(mode="after")
    def _target(self) -> IngressRoute:
        if (self.to is None) == (not self.split):
            raise ValueError("give `to` or `split`")
        if self.split and sum(t.weight for t in self.split) != 100:
            raise ValueError("split: weights add up to 100")
        return self

    @property
    def targets(self) -> list[RouteTarget]:
        return [self.to] if self.to is not None else list(self.split)


class Sources(WireModel):
    ip_blocks: list[Cidr] = Field(default_factory=list)
    request_principals: list[str] = Field(default_factory=list)


class IngressAccess(WireModel):
    action: Action = Action.ALLOW
    sources: Sources = Field(default_factory=Sources)
    jwt_claims: dict[str, str] = Field(default_factory=dict)


class IngressIntentSpec(WireModel):
    """User-facing hosts: gateways, DNS, routes to services and who may come in."""

    hosts: list[Hostname] = Field(min_length=1)
    dns: list[DnsTarget] = Field(default_factory=list)
    entities: list[Entity] = Field(min_length=1)
    routes: list[IngressRoute] = Field(min_length=1)
    access: list[IngressAccess] = Field(default_factory=list)
    placement: Placement = Field(default_factory=Placement)

    def field_problems(self) -> list[tuple[str, str]]:
        """Rules across fields, as (path under spec, message)."""
        return gateway_problems(self)


def gateway_problems(spec: IngressIntentSpec) -> list[tuple[str, str]]:
    """What the shared ingress gateway cannot carry: a bare '*' host, and DENY rules on requests beside a
    PASSTHROUGH entity (which sees no request)."""
    problems = [
        (f"hosts[{index}]", "'*' would claim every host of the shared ingress gateway: name the hosts")
        for index, host in enumerate(spec.hosts)
        if host == "*"
    ]
    if any(e.tls is not None and e.tls.mode is TlsMode.PASSTHROUGH for e in spec.entities):
        problems += [
            (
                f"access[{index}]",
                "a DENY by requestPrincipals or jwtClaims cannot hold on a PASSTHROUGH entity: the gateway never "
                "sees its requests (Istio would deny every connection); serve those hosts from an IngressIntent "
                "of their own",
            )
            for index, entry in enumerate(spec.access)
            if entry.action is Action.DENY and (entry.sources.request_principals or entry.jwt_claims)
        ]
    return problems
