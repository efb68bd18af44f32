"""The specs of logical clouds and traffic intents (service-to-service, external, user-facing)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, AnyHttpUrl, Field, model_validator

from meshplane.model.access import HeaderName
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


REQUIRED_PATH_NORMALIZATION = "MERGE_SLASHES"
"""What istiod's `meshConfig.pathNormalization.normalization` must be (or DECODE_AND_MERGE_SLASHES).

Authorization paths are matched after the proxy's normalization; Istio's default (BASE) resolves
`.` and `..` but keeps `//`, so a DENY on `/orders/admin/*` would miss `/orders//admin/x` while an
ALLOW on `/orders/*` admits it. No workload may override it (`connectionSettings.httpMergeSlashes`).
"""

_UNNORMALIZED = ("//", "/./", "/../", "\\", "%2f", "%5c", "%2e")


def _check_policy_path(value: str) -> str:
    """A request path after normalization can match it: rules that no normalized path can match
    would be dead for ALLOW and, for DENY, a silent hole."""
    literal = value.strip("*").lower()
    normalized = not any(part in literal for part in _UNNORMALIZED) and not literal.endswith(("/.", "/.."))
    if value != "*" and (not normalized or not (value.startswith("*") or value.startswith("/"))):
        raise ValueError(
            f"{value!r} is not a path a request has after the mesh's path normalization "
            f"({REQUIRED_PATH_NORMALIZATION}: '.', '..' resolved, '//' merged), so it would never match: "
            "write it as '/…', with no empty, '.' or '..' segment and no encoded slash, backslash or dot"
        )
    return value


Cidr = Annotated[str, AfterValidator(_check_cidr)]
PolicyPath = Annotated[str, AfterValidator(_check_policy_path)]
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


class ServerTlsMode(StrEnum):
    DISABLE = "DISABLE"
    SIMPLE = "SIMPLE"


class ServerTls(WireModel):
    """How callers' sidecars speak to a server with no sidecar: plaintext, or TLS it terminates itself."""

    mode: ServerTlsMode = ServerTlsMode.SIMPLE
    ca_config_map: Name | None = None
    """A ConfigMap in the server's namespace with the CA certificate (key `ca.crt` or `cacert`) that
    verifies the server; default: the proxies' system roots. (A Secret is not offered: istiod gives
    no Secret to a sidecar through a DestinationRule, and would send plaintext instead.)"""
    sni: Hostname | None = None
    subject_alt_names: list[str] = Field(default_factory=list)


class ServerService(WireModel):
    name: Name
    app: Name | None = None
    """The pods' `app` label; defaults to the service name."""
    port: Port
    target_port: Port | None = None
    """The pods' port the Service forwards `port` to; defaults to `port`. Istio matches policy
    ports against it, and every rule of the intent is scoped to it."""
    protocol: ServiceProtocol = ServiceProtocol.HTTP
    headless: bool = False
    """A headless Service (clusterIP None): callers connect to the pod address they resolved
    (Istio's ORIGINAL_DST), so no load balancer picks endpoints; per-pod names resolve only in
    clusters with replicas."""
    sidecar: bool = True
    """False: the server's pods run without an Istio sidecar. Nothing on them enforces Istio policy
    or takes Istio mTLS: clients only scope where callers' sidecars may go, and `tls` says how they
    connect (default plaintext)."""
    tls: ServerTls | None = None


class IntentRetries(WireModel):
    attempts: int = Field(ge=1, le=10)
    per_try_timeout: Duration | None = None


class CircuitBreaker(WireModel):
    """Connection-pool limits and outlier ejection, applied by each calling sidecar."""

    max_connections: int | None = Field(default=None, ge=1)
    max_pending_requests: int | None = Field(default=None, ge=1)
    """HTTP only: requests queued while waiting for a connection."""
    http2_max_requests: int | None = Field(default=None, ge=1)
    """HTTP only: requests in flight to the service at once (HTTP/1.1 and HTTP/2 alike)."""
    max_requests_per_connection: int | None = Field(default=None, ge=1)
    """HTTP only: requests a connection carries before it is closed (1: no keep-alive)."""
    consecutive_errors: int | None = Field(default=None, ge=1)
    interval: Duration | None = None
    base_ejection_time: Duration | None = None

    @property
    def http_limits(self) -> bool:
        limits = (self.max_pending_requests, self.http2_max_requests, self.max_requests_per_connection)
        return any(limit is not None for limit in limits)


class HashCookie(WireModel):
    name: str = Field(min_length=1)
    path: str | None = None
    ttl: Duration | None = None
    """With a ttl the sidecar sets the cookie when the request has none; without, it only reads it."""


class ConsistentHash(WireModel):
    """Soft session affinity: requests with the same key go to the same endpoint while it is up.

    Exactly one key: a cookie, a request header, or the caller's address (also for TCP).
    """

    http_cookie: HashCookie | None = None
    http_header_name: HeaderName | None = None
    use_source_ip: bool = False

    @model_validator(mode="after")
    def _one_key(self) -> ConsistentHash:
        keys = [self.http_cookie is not None, self.http_header_name is not None, self.use_source_ip]
        if sum(keys) != 1:
            raise ValueError("give exactly one of httpCookie, httpHeaderName and useSourceIp")
        return self

    @property
    def needs_http(self) -> bool:
        return not self.use_source_ip


class TrafficPolicy(WireModel):
    load_balancer: LoadBalancer = LoadBalancer.ROUND_ROBIN
    consistent_hash: ConsistentHash | None = None
    """Instead of loadBalancer (Istio takes one or the other)."""
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
    paths: list[PolicyPath] = Field(default_factory=list)
    """Istio's path forms: exact, `prefix*`, `*suffix`, `*`; as requests look after normalization."""
    headers: dict[str, str] = Field(default_factory=dict)
    jwt_claims: dict[str, str] = Field(default_factory=dict)


class IntentClient(WireModel):
    """A caller: a mesh workload (matched by its principal) and / or callers outside the mesh.

    `cidrs` are plaintext callers, matched by their address as the server's sidecar sees it (the
    direct peer) and only when they present no mesh identity: mesh callers from another cluster
    come through the east-west gateway, whose address is their peer, and are matched by principal.
    They need mtls PERMISSIVE: under STRICT the sidecar refuses every plaintext connection. Not
    `remoteIpBlocks`: on a sidecar with no trusted proxy in front it would trust the caller's own
    X-Forwarded-For.
    """

    service: ClientService | None = None
    cidrs: list[Cidr] = Field(default_factory=list)
    access: list[AccessRule] = Field(default_factory=lambda: [AccessRule()])

    @model_validator(mode="after")
    def _who(self) -> IntentClient:
        if self.service is None and not self.cidrs:
            raise ValueError("a client is a service or a set of cidrs")
        return self


class JwtRule(WireModel):
    """How one issuer's tokens are validated: the part of Istio's JWTRule meshplane renders.

    A request with a token that fails validation is refused (401); one without a token passes on
    to the authorization rules without claims, so conditions on claims do not match it.
    """

    issuer: str = Field(min_length=1)
    jwks_uri: AnyHttpUrl | None = None
    """Where istiod fetches the issuer's key set (JWKS)."""
    jwks: str | None = None
    """Or the key set itself, inline JSON."""
    audiences: list[str] = Field(default_factory=list)
    """Accepted `aud` values; empty: any."""

    @model_validator(mode="after")
    def _one_key_source(self) -> JwtRule:
        if (self.jwks is None) == (self.jwks_uri is None):
            raise ValueError("give exactly one of jwksUri and jwks")
        return self


class IntentAuthentication(WireModel):
    """Who validates request tokens: without it no claim and no request principal is ever set."""

    jwt: list[JwtRule] = Field(default_factory=list)

    @model_validator(mode="after")
    def _issuers_once(self) -> IntentAuthentication:
        issuers = [rule.issuer for rule in self.jwt]
        if len(issuers) != len(set(issuers)):
            raise ValueError("jwt: an issuer is listed twice")
        return self

    def token_problems(
        self, path: str, claims: Mapping[str, str], request_principals: Sequence[str] = ()
    ) -> list[tuple[str, str]]:
        """(path, message) for conditions on tokens that no configured issuer could ever satisfy."""
        problems = []
        issuers = {rule.issuer for rule in self.jwt}
        if (claims or request_principals) and not issuers:
            field = "jwtClaims" if claims else "sources.requestPrincipals"
            problems.append(
                (
                    f"{path}.{field}",
                    "token conditions need authentication.jwt: without a validated token no claim or request "
                    "principal is set, so an ALLOW rule never matches and a DENY rule never applies",
                )
            )
        elif "iss" in claims and claims["iss"] not in issuers:
            problems.append((f"{path}.jwtClaims.iss", f"{claims['iss']!r} is not an issuer in authentication.jwt"))
        return problems


class ServiceIntentSpec(WireModel):
    """Who may call a service, how, and where its replicas run."""

    service: ServerService
    placement: Placement = Field(default_factory=Placement)
    mtls: MtlsMode = MtlsMode.STRICT
    traffic_policy: TrafficPolicy = Field(default_factory=TrafficPolicy)
    clients: list[IntentClient] = Field(default_factory=list)
    authentication: IntentAuthentication = Field(default_factory=IntentAuthentication)
    """How the server's sidecar validates request tokens (rendered as a RequestAuthentication)."""

    def field_problems(self) -> list[tuple[str, str]]:
        """Rules across fields, as (path under spec, message), so each error still names its field."""
        problems = self._headless_problems() + self._sidecarless_problems()
        wanted = self.traffic_policy
        if wanted.consistent_hash is not None and "load_balancer" in wanted.model_fields_set:
            problems.append(("trafficPolicy.consistentHash", "give loadBalancer or consistentHash, not both"))
        if not self.service.protocol.is_http:
            protocol = self.service.protocol.value
            if wanted.consistent_hash is not None and wanted.consistent_hash.needs_http:
                problems.append(("trafficPolicy.consistentHash", f"a cookie or header needs HTTP, not {protocol}"))
            if wanted.circuit_breaker is not None and wanted.circuit_breaker.http_limits:
                problems.append(
                    ("trafficPolicy.circuitBreaker", f"request limits need HTTP, not {protocol}: use maxConnections")
                )
        for index, client in enumerate(self.clients):
            if client.service is not None and self.mtls is MtlsMode.DISABLE and self.service.sidecar:
                problems.append(
                    (
                        f"clients[{index}].service",
                        "under mtls DISABLE callers send plaintext and present no principal, so a service client "
                        "could never be matched: use PERMISSIVE or STRICT (or cidrs for callers outside the mesh)",
                    )
                )
            if client.cidrs and self.mtls is MtlsMode.STRICT:
                problems.append(
                    (
                        f"clients[{index}].cidrs",
                        "callers outside the mesh cannot connect under mtls STRICT (the server's sidecar refuses "
                        "plaintext) and mesh callers are matched by principal: set mtls PERMISSIVE to admit them",
                    )
                )
            for number, rule in enumerate(client.access):
                path = f"clients[{index}].access[{number}]"
                problems += self.authentication.token_problems(path, rule.jwt_claims)
        return problems

    def _headless_problems(self) -> list[tuple[str, str]]:
        if not self.service.headless:
            return []
        wanted = self.traffic_policy
        given = {
            "loadBalancer": "load_balancer" in wanted.model_fields_set,
            "consistentHash": wanted.consistent_hash is not None,
            "localityFailover": wanted.locality_failover,
        }
        reason = "callers of a headless Service connect to the pod address they resolved: no balancer picks one"
        return [(f"trafficPolicy.{field}", reason) for field, set_ in given.items() if set_]

    def _sidecarless_problems(self) -> list[tuple[str, str]]:
        if self.service.sidecar:
            if self.service.tls is not None:
                return [("service.tls", "only for a server without a sidecar: callers use Istio mTLS")]
            return []
        problems = []
        if self.mtls is not MtlsMode.DISABLE:
            problems.append(
                ("mtls", "a server without a sidecar cannot take Istio mTLS: set DISABLE (service.tls for its own TLS)")
            )
        for index, client in enumerate(self.clients):
            for number, rule in enumerate(client.access):
                if rule.action is Action.DENY or rule.methods or rule.paths or rule.headers or rule.jwt_claims:
                    problems.append(
                        (
                            f"clients[{index}].access[{number}]",
                            "no sidecar on the server enforces access rules: only a plain ALLOW (who may call) is "
                            "kept, and it is not enforced either",
                        )
                    )
        if self.authentication.jwt:
            problems.append(("authentication.jwt", "tokens are validated by the server's sidecar, and it has none"))
        return problems

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


class OriginationMode(StrEnum):
    SIMPLE = "SIMPLE"
    MUTUAL = "MUTUAL"


class TlsOrigination(WireModel):
    """TLS the mesh opens to the external host on a port the application speaks plain HTTP on.

    The sidecar (route `direct`) or the egress gateway (`egressGateway`) connects to `targetPort`
    with TLS and checks the host's certificate against the host's name: against the system's CAs,
    or the `ca.crt` of the credential.
    """

    mode: OriginationMode = OriginationMode.SIMPLE
    target_port: Port = 443
    credential_name: Name | None = None
    """A Secret in the egress gateway's namespace (istio-system), read by the gateway: `tls.crt` and
    `tls.key` (the client certificate, for MUTUAL), `ca.crt` (to check the host). meshplane carries
    only its name; the certificate stays in the cluster."""


class EgressPort(WireModel):
    number: Port
    protocol: ServiceProtocol = ServiceProtocol.TLS
    name: Name | None = None
    tls_origination: TlsOrigination | None = None


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


EGRESS_GATEWAY_PORTS = (80, 443)
"""The ports of the stock egress gateway Service (`istio-egressgateway` in istio-system: 80 -> 8080,
443 -> 8443). A Gateway server binds the Service port and the pods listen on its target port, so
traffic through the gateway can use these ports only."""


class EgressClient(WireModel):
    """A workload that may reach the external application.

    Enforced only through the egress gateway, which refuses every other workload identity (as long
    as the cluster keeps pods from going out around it). With `direct` and `proxy` the traffic meets
    no Istio proxy but the caller's own, so `clients` only decide whose Sidecar lists the hosts and
    which namespaces see them: routing scope, not access control.
    """

    service: ClientService


class EgressIntentSpec(WireModel):
    """An external application: where it is, how to reach it, and who may (see EgressClient)."""

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
        for index, port in enumerate(self.ports):
            if port.protocol is ServiceProtocol.TCP and not self.addresses:
                raise ValueError(
                    f"ports[{index}]: a TCP port needs addresses: without them every sidecar that sees this "
                    f"entry would send all its port {port.number} traffic here, whatever its destination"
                )
        if self.route.via is EgressVia.EGRESS_GATEWAY:
            self._fits_the_egress_gateway()
        for index, port in enumerate(self.ports):
            if port.tls_origination is not None:
                self._can_originate(index, port, port.tls_origination)
        return self

    def _can_originate(self, index: int, port: EgressPort, tls: TlsOrigination) -> None:
        where = f"ports[{index}].tlsOrigination"
        if not port.protocol.is_http:
            raise ValueError(f"{where}: the application must speak HTTP on the port, not {port.protocol.value}")
        if not self.hosts or any(h.startswith("*") for h in self.hosts):
            raise ValueError(f"{where}: the host's certificate is checked by name: give hosts, none a wildcard")
        if self.route.via is EgressVia.PROXY:
            raise ValueError(f"{where}: TLS is originated by the sidecar or the egress gateway, not through a proxy")
        if tls.mode is OriginationMode.MUTUAL and tls.credential_name is None:
            raise ValueError(f"{where}: MUTUAL needs the credentialName of the client certificate")
        if tls.credential_name is not None and self.route.via is not EgressVia.EGRESS_GATEWAY:
            raise ValueError(
                f"{where}: a credential is read by the egress gateway from its namespace: route via egressGateway"
            )

    def _fits_the_egress_gateway(self) -> None:
        if self.resolution is Resolution.NONE:
            raise ValueError(
                "resolution NONE cannot go through the egress gateway: the gateway must resolve the host "
                "itself and be told it by SNI; use DNS or STATIC, or route direct"
            )
        for index, port in enumerate(self.ports):
            if port.number not in EGRESS_GATEWAY_PORTS:
                served = ", ".join(str(p) for p in EGRESS_GATEWAY_PORTS)
                raise ValueError(
                    f"ports[{index}]: the egress gateway serves ports {served} only, not {port.number}; "
                    "route this port direct or via a proxy"
                )


DEFAULT_RECORD_TTL = 60
"""Seconds, for records whose DNS target names none: resolvers keep answers a minute, and a cluster that
stops serving a host drops out of them a minute later."""
MAX_RECORD_TTL = 86400
"""A day: longer, and a cluster that stops serving a host stays in resolvers' answers for days."""


class DnsTarget(WireModel):
    server: Name
    zone: str = Field(min_length=1)
    ttl: int | None = Field(default=None, ge=1, le=MAX_RECORD_TTL)
    """Seconds resolvers may keep the records of this zone's hosts; absent: DEFAULT_RECORD_TTL."""


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
    authentication: IntentAuthentication = Field(default_factory=IntentAuthentication)
    """How the ingress gateway validates request tokens (rendered as a RequestAuthentication)."""

    def field_problems(self) -> list[tuple[str, str]]:
        """Rules across fields, as (path under spec, message)."""
        return gateway_problems(self) + ingress_token_problems(self)


def ingress_token_problems(spec: IngressIntentSpec) -> list[tuple[str, str]]:
    """Token conditions of the access rules that no configured issuer could satisfy."""
    problems = []
    for index, entry in enumerate(spec.access):
        path = f"access[{index}]"
        problems += spec.authentication.token_problems(path, entry.jwt_claims, entry.sources.request_principals)
    return problems


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
