"""The specs of every kind. One class per kind's spec; the registry ties them to names and wire types."""

from __future__ import annotations

import ipaddress
import re
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import AfterValidator, AnyHttpUrl, Field, field_validator

from meshplane.model.access import Authentication, Cors, RateLimit, Scope
from meshplane.model.base import WireModel
from meshplane.model.meta import Name, Placement, check_name
from meshplane.model.shaping import Shaping
from meshplane.model.upstream import (
    BackendCredential,
    BackendTLS,
    CircuitBreaker,
    HealthCheck,
    HostHeader,
    OutlierDetection,
    RetryPolicy,
    Timeout,
)

_HOSTNAME = re.compile(r"^(\*|(\*\.)?([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\.)*[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)$")
_PATH_SEGMENT = re.compile(r"^([A-Za-z0-9._~!$&'()+,;=:@%-]+|\{[A-Za-z_][A-Za-z0-9_]*\}|\*)$")


def _check_hostname(value: str) -> str:
    if not _HOSTNAME.match(value):
        raise ValueError(f"{value!r} is not a hostname, '*' or '*.domain'")
    return value


def _check_base_path(value: str) -> str:
    if value != "/" and (not value.startswith("/") or value.endswith("/")):
        raise ValueError(f"{value!r} must start with '/' and not end with '/' (or be '/')")
    if value != "/":
        _check_segments(value)
    return value


def _check_operation_path(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError(f"{value!r} must start with '/'")
    if value != "/":
        _check_segments(value.rstrip("/") if value != "/" else value)
    if "*" in value and not value.endswith("/*"):
        raise ValueError(f"{value!r}: '*' may stand only as the last segment")
    return value


def _check_service(value: str) -> str:
    name, dot, namespace = value.partition(".")
    if not dot:
        raise ValueError(f"{value!r} is not '<service>.<namespace>'")
    check_name(name)
    check_name(namespace)
    return value


def _check_segments(path: str) -> None:
    for segment in path.split("/")[1:]:
        if not _PATH_SEGMENT.match(segment):
            raise ValueError(f"path segment {segment!r} is not valid (use literal text, {{param}} or a final *)")


Hostname = Annotated[str, AfterValidator(_check_hostname)]
BasePath = Annotated[str, AfterValidator(_check_base_path)]
OperationPath = Annotated[str, AfterValidator(_check_operation_path)]
ServiceName = Annotated[str, AfterValidator(_check_service)]
Port = Annotated[int, Field(ge=1, le=65535)]


class ProjectSpec(WireModel):
    """A tenant. Every project-scoped object lives in one."""

    description: str = ""
    display_name: str | None = None


class EastWestGateway(WireModel):
    address: str
    port: Port


def _check_ingress_address(value: str) -> str:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        if value.startswith("*") or not _HOSTNAME.match(value):
            raise ValueError(f"{value!r} is neither an IP address nor a hostname") from None
    return value


IngressAddress = Annotated[str, AfterValidator(_check_ingress_address)]


class IngressGateway(WireModel):
    """Where users reach the cluster's ingress gateway: what DNS records of user-facing hosts point at.

    The public addresses of the ingress gateway's Service (its load balancer's IPs or hostname), never the
    east-west gateway's: that one passes mesh mTLS through on 15443 and has no user-facing listener.
    Declared addresses win; without them the cluster's are those its agent reports from the ingress gateway
    Service's status.loadBalancer (see `ServiceEndpointSpec.load_balancer`).
    """

    addresses: list[IngressAddress] = Field(min_length=1)
    """IP addresses (A / AAAA records) or hostnames (a CNAME, used only when no serving cluster has an IP)."""


class ClusterPublish(WireModel):
    """What the objects made in a cluster (API CRs) may become at the control plane: an admin's grant."""

    projects: list[Name] = Field(default_factory=list)
    """The projects the cluster may publish into; empty (the default): it publishes nothing."""


class ClusterSpec(WireModel):
    """A data-plane cluster; its labels (in metadata) drive placement."""

    description: str = ""
    east_west_gateway: EastWestGateway | None = None
    ingress_gateway: IngressGateway | None = None
    """Without it the DNS records of user-facing hosts point at the addresses the cluster's agent reports for its
    ingress gateway Service, and at nothing while it reports none."""
    publish: ClusterPublish = Field(default_factory=ClusterPublish)


SERIAL_PATTERN = r"^(0|[1-9a-f][0-9a-f]{0,39})$"
"""A certificate serial number as meshplane writes it: lower-case hex, no leading zeros (RFC 5280: at most 20 bytes)."""


class CertificateRevocationSpec(WireModel):
    """An agent certificate every server refuses from now on, whatever time it has left. The object's name
    is the certificate's serial: revoking goes by certificate, so the cluster's re-issued one still works."""

    cluster: Name
    """The cluster the certificate was issued for."""
    reason: str = Field(default="", max_length=200)


class HttpMethod(StrEnum):
    GET = "GET"
    HEAD = "HEAD"
    POST = "POST"
    PUT = "PUT"
    PATCH = "PATCH"
    DELETE = "DELETE"
    OPTIONS = "OPTIONS"


class Operation(WireModel):
    """One method on one path below the API's basePath; `{param}` matches one segment, a final `*` the rest."""

    method: HttpMethod
    path: OperationPath
    scopes: list[Scope] = Field(default_factory=list)
    """Every one of these must be in the caller's token (needs `authentication.jwt`)."""
    rate_limit: RateLimit | None = None
    timeout: Timeout | None = None
    """The whole request, until the last byte of the answer; `none`: no limit. Default: the API's."""
    idle_timeout: Timeout | None = None
    """Nothing sent either way for this long ends the request; `none`: never. Default: the API's."""
    stream_timeout: Timeout | None = None
    """The longest a request may last, whatever flows; `none`: no limit. Default: the API's."""
    retries: RetryPolicy | None = None
    """Default: the API's."""
    shaping: Shaping | None = None
    """Replaces the API's shaping part by part (see `model.shaping`)."""


class BackendProtocol(StrEnum):
    HTTP = "http"
    HTTP2 = "http2"
    GRPC = "grpc"


class Backend(WireModel):
    """An upstream of an API: requests go to these, split by weight."""

    host: str | None = Field(default=None, min_length=1)
    service: ServiceName | None = None
    """`<service>.<namespace>`: a Kubernetes Service of whichever cluster serves the API, instead of a host;
    `port` is then one of the Service's ports."""
    port: Port
    protocol: BackendProtocol = BackendProtocol.HTTP
    base_path: BasePath = "/"
    weight: int = Field(default=100, ge=0, le=1_000_000)
    timeout: Timeout | None = None
    retries: RetryPolicy | None = None
    tls: BackendTLS | None = None
    """Call the backend over TLS; absent: plain text."""
    host_rewrite: HostHeader | None = None
    """The `Host` the backend is sent. Default: the backend's host when it is a DNS name, else the caller's."""
    health_check: HealthCheck | None = None
    outlier_detection: OutlierDetection | None = None
    circuit_breaker: CircuitBreaker | None = None
    credential: BackendCredential | None = None


ROUTE_GROUP = "gateway.networking.k8s.io"


class RouteTargetRef(WireModel):
    """A Gateway API HTTPRoute an API attaches to, in the shape of Gateway API policy attachment's
    `targetRefs`. The namespace defaults to the API's project (a project is a namespace). An API attaches to
    a whole route: `sectionName` is refused, since a rule's name is optional and names only some rules."""

    group: Literal["gateway.networking.k8s.io"]
    kind: Literal["HTTPRoute"]
    name: Name
    namespace: Name | None = None
    section_name: str | None = None

    def route(self, project: str) -> tuple[str, str]:
        """(namespace, name) of the route, for an API of `project`."""
        return (self.namespace or project, self.name)


class APISpec(WireModel):
    """A managed API: what the gateway exposes under basePath and where it sends it; or, with `targetRefs`,
    the API management (authentication, plans, limits) of Gateway API routes that carry its traffic."""

    version: str = Field(default="v1", min_length=1, max_length=63)
    base_path: BasePath | None = None
    """Required unless `targetRefs` are given (see `field_problems`)."""
    hostnames: list[Hostname] = Field(default_factory=lambda: ["*"], min_length=1)
    operations: list[Operation] = Field(default_factory=list)
    backends: list[Backend] = Field(default_factory=list)
    """At least one unless `targetRefs` are given."""
    timeout: Timeout | None = None
    """The whole request, until the last byte of the answer; `none`: no limit (Envoy's default: 15s)."""
    idle_timeout: Timeout | None = None
    """Nothing sent either way for this long ends the request; `none`: never (default: the listener's, 5m)."""
    stream_timeout: Timeout | None = None
    """The longest a request may last, whatever flows; `none`: no limit (the default)."""
    retries: RetryPolicy | None = None
    """Retries of every operation that has none of its own."""
    authentication: Authentication | None = None
    cors: Cors | None = None
    rate_limit: RateLimit | None = None
    """The API's own limit, for all callers together."""
    shaping: Shaping | None = None
    """Header changes, URL rewrite, redirect, mirror or direct response on every route of the API."""
    placement: Placement = Field(default_factory=Placement)
    gateways: list[Name] = Field(default_factory=list)
    """Gateways of the project whose listeners serve the API; empty: the cluster's default HTTP listener."""
    target_refs: list[RouteTargetRef] = Field(default_factory=list, max_length=16)
    """HTTPRoutes whose every rule gets this API's checks and limits, in the clusters the API is placed on."""

    # Field validators rather than one model validator: each error then carries its field's path.
    @field_validator("backends")
    @classmethod
    def _backends_agree(cls, backends: list[Backend]) -> list[Backend]:
        if backends and sum(b.weight for b in backends) == 0:
            raise ValueError("at least one backend needs a weight above 0")
        if len({b.base_path for b in backends}) > 1:
            raise ValueError("every backend of an API takes requests under the same basePath")
        return backends

    @field_validator("operations")
    @classmethod
    def _operations_unique(cls, operations: list[Operation]) -> list[Operation]:
        seen: set[tuple[str, str]] = set()
        for op in operations:
            key = (op.method.value, op.path)
            if key in seen:
                raise ValueError(f"{op.method.value} {op.path} is declared twice")
            seen.add(key)
        return operations

    def certificate_refs(self) -> set[str]:
        """The TLSCertificates its backends present (mutual TLS): they go wherever the API goes."""
        return {b.tls.client_certificate_ref for b in self.backends if b.tls and b.tls.client_certificate_ref}

    def field_problems(self) -> list[tuple[str, str]]:
        """Rules across fields, as (path under spec, message), so each error still names its field."""
        problems = self._traffic_problems()
        jwt = self.authentication is not None and self.authentication.jwt is not None
        problems += [
            (f"operations[{index}].scopes", "scopes need authentication.jwt: only user tokens carry scopes")
            for index, op in enumerate(self.operations)
            if op.scopes and not jwt
        ]
        user = self.authentication.jwt if self.authentication is not None else None
        if user is not None:
            for index, issuer in enumerate(user.issuers()):
                if issuer.jwks_ca_certificates is not None and not _https(issuer.jwks_uri):
                    where = "" if index == 0 else f".additionalIssuers[{index - 1}]"
                    problems.append((f"authentication.jwt{where}.jwksCaCertificates", "only with an https jwksUri"))
        for index, backend in enumerate(self.backends):
            if backend.host is None and backend.service is None:
                problems.append((f"backends[{index}].host", "a backend needs a host or a service"))
            elif backend.host is not None and backend.service is not None:
                problems.append((f"backends[{index}].service", "a backend has a host or a service, not both"))
            check = backend.health_check
            if check is not None and backend.protocol is BackendProtocol.GRPC and check.path is not None:
                problems.append((f"backends[{index}].healthCheck.path", "a gRPC backend is checked over gRPC"))
            if check is not None and backend.protocol is not BackendProtocol.GRPC and check.path is None:
                problems.append((f"backends[{index}].healthCheck.path", "an HTTP backend's health check needs one"))
            if check is not None and backend.protocol is not BackendProtocol.GRPC and check.grpc_service is not None:
                problems.append((f"backends[{index}].healthCheck.grpcService", "only for a gRPC backend"))
            tls = backend.tls
            if tls is not None and backend.service is not None and tls.sni is None and not tls.subject_alt_names:
                problems.append((f"backends[{index}].tls.sni", "a service backend over TLS needs the name to verify"))
        return problems

    def _traffic_problems(self) -> list[tuple[str, str]]:
        """Traffic of its own (basePath, backends) or routes to attach to (targetRefs): one or the other. An
        attached API keeps who may call and how much (authentication, plans, limits, placement); what the
        route says of its traffic stays the route's."""
        if not self.target_refs:
            missing = {"basePath": self.base_path is None, "backends": not self.backends}
            return [(path, own_traffic_needed(path)) for path, absent in missing.items() if absent]
        present = {"basePath": self.base_path is not None, "operations": bool(self.operations)}
        present["backends"] = bool(self.backends)
        problems = [(path, own_traffic_refused(path)) for path, there in present.items() if there]
        problems += [
            (path, f"an API attached to routes (targetRefs) leaves {what} to its HTTPRoutes")
            for attribute, path, what in _ROUTE_DECIDES
            if getattr(self, attribute) != APISpec.model_fields[attribute].get_default(call_default_factory=True)
        ]
        if self.authentication is not None and self.authentication.mtls is not None:
            why = (
                "an API attached to routes takes API keys or tokens: a Gateway API listener asks no client certificate"
            )
            problems.append(("authentication.mtls", why))
        seen: set[tuple[str | None, str]] = set()
        for index, ref in enumerate(self.target_refs):
            if ref.section_name is not None:
                problems.append(
                    (f"targetRefs[{index}].sectionName", "an API attaches to a whole HTTPRoute, not one of its rules")
                )
            if (ref.namespace, ref.name) in seen:
                named = f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name
                problems.append((f"targetRefs[{index}]", f"names HTTPRoute {named} again"))
            seen.add((ref.namespace, ref.name))
        return problems


OWN_TRAFFIC_NEEDED = {"basePath": "a basePath", "backends": "backends"}
"""What an API not attached to routes must have (field path -> how a message names it)."""
OWN_TRAFFIC = ("basePath", "operations", "backends")
"""What an API attached to routes (targetRefs) has none of: the routes carry its traffic."""


def own_traffic_needed(path: str) -> str:
    return f"an API needs {OWN_TRAFFIC_NEEDED[path]} (or targetRefs naming the routes it attaches to)"


def own_traffic_refused(path: str) -> str:
    return f"an API attached to routes (targetRefs) has no {path} of its own"


_ROUTE_DECIDES = (
    ("hostnames", "hostnames", "hostnames"),
    ("timeout", "timeout", "timeouts"),
    ("idle_timeout", "idleTimeout", "timeouts"),
    ("stream_timeout", "streamTimeout", "timeouts"),
    ("retries", "retries", "retries"),
    ("cors", "cors", "CORS (the HTTPRoute's CORS filter)"),
    ("shaping", "shaping", "shaping (the HTTPRoute's filters)"),
    ("gateways", "gateways", "the Gateways (the HTTPRoute's parentRefs)"),
)
"""What an HTTPRoute already says of its traffic: (attribute, field path, how an error names it)."""


def _https(uri: AnyHttpUrl | None) -> bool:
    return uri is not None and uri.scheme == "https"
