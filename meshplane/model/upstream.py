"""How the gateway talks to an API's backends: TLS, health, limits on the load it sends, timeouts and retries."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field, ValidationInfo, field_validator, model_validator

from meshplane.model.access import HeaderName
from meshplane.model.base import WireModel
from meshplane.model.durations import Duration, duration_seconds
from meshplane.model.meta import Name
from meshplane.model.pem import PemCertificates
from meshplane.model.sealed import SealedValue

NO_TIMEOUT = "none"
"""A timeout that never fires: for long-lived streams (gRPC streaming, server-sent events, downloads)."""

HTTP_RETRY_ON = frozenset(
    {
        "5xx",
        "gateway-error",
        "reset",
        "reset-before-request",
        "connect-failure",
        "envoy-ratelimited",
        "retriable-4xx",
        "refused-stream",
        "retriable-status-codes",
        "http3-post-connect-failure",
    }
)
GRPC_RETRY_ON = frozenset({"cancelled", "deadline-exceeded", "internal", "resource-exhausted", "unavailable"})
_SERVER_NAME = re.compile(r"^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\.)*[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_HOST_HEADER = re.compile(r"^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\.)*[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(:\d{1,5})?$")


def _check_timeout(text: str) -> str:
    if text != NO_TIMEOUT:
        duration_seconds(text)
    return text


def _positive(text: str) -> str:
    if duration_seconds(text) <= 0:
        raise ValueError(f"{text!r} must be longer than 0")
    return text


def _check_server_name(value: str) -> str:
    if not _SERVER_NAME.match(value):
        raise ValueError(f"{value!r} is not a DNS name")
    return value


def _check_host_header(value: str) -> str:
    if not _HOST_HEADER.match(value):
        raise ValueError(f"{value!r} is not a host name, with or without a port")
    return value


def retry_conditions(on: str) -> list[str]:
    """The conditions of a comma-separated `on`, in order, blanks dropped."""
    return [part.strip() for part in on.split(",") if part.strip()]


def _check_retry_on(on: str) -> str:
    conditions = retry_conditions(on)
    if not conditions:
        raise ValueError("names no condition")
    unknown = [condition for condition in conditions if condition not in HTTP_RETRY_ON | GRPC_RETRY_ON]
    if unknown:
        known = ", ".join(sorted(HTTP_RETRY_ON | GRPC_RETRY_ON))
        raise ValueError(f"unknown retry condition(s) {', '.join(unknown)}; known: {known}")
    return on


Timeout = Annotated[str, AfterValidator(_check_timeout)]
"""A duration, or `none` for no limit at all."""
Interval = Annotated[Duration, AfterValidator(_positive)]
ServerName = Annotated[str, AfterValidator(_check_server_name)]
HostHeader = Annotated[str, AfterValidator(_check_host_header)]
RetryOn = Annotated[str, AfterValidator(_check_retry_on)]
StatusCode = Annotated[int, Field(ge=100, le=599)]


class Backoff(WireModel):
    """Time between retries: Envoy's jittered exponential back-off from `baseInterval` up to `maxInterval`."""

    base_interval: Interval = "25ms"
    max_interval: Interval | None = None
    """Default: ten times the base interval."""

    @field_validator("max_interval")
    @classmethod
    def _not_below_base(cls, value: str | None, info: ValidationInfo) -> str | None:
        base = info.data.get("base_interval")
        if value is not None and base is not None and duration_seconds(value) < duration_seconds(base):
            raise ValueError(f"must not be shorter than baseInterval ({base})")
        return value


class RetryPolicy(WireModel):
    attempts: int = Field(ge=1, le=10)
    """Retries after the first try."""
    per_try_timeout: Duration | None = None
    on: RetryOn = "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes"
    """Envoy's retry conditions, comma-separated (`5xx`, `gateway-error`, `reset`, gRPC's `unavailable`, ...)."""
    status_codes: list[StatusCode] = Field(default_factory=list)
    """Answers that are retried (the `retriable-status-codes` condition, added to `on` when these are given)."""
    backoff: Backoff | None = None


class BackendTLS(WireModel):
    """TLS from the gateway to the backend. The backend's certificate is always verified: against `caCertificates`
    or the gateways' system CA bundle, and its names against `subjectAltNames` (default: the SNI name)."""

    sni: ServerName | None = None
    """The server name sent (default: the backend's host, when it is a DNS name)."""
    ca_certificates: PemCertificates | None = None
    """PEM bundle of the CAs that sign the backend's certificate."""
    subject_alt_names: list[ServerName] = Field(default_factory=list)
    """DNS names the certificate must carry one of (default: the SNI name)."""
    client_certificate_ref: Name | None = None
    """A TLSCertificate of the API's project the gateway presents to the backend (mutual TLS)."""


class HealthCheck(WireModel):
    """Active health checking: every `interval` the gateway asks each endpoint for `path`, where a 200 counts as
    healthy; a gRPC backend is asked over gRPC's own health protocol (grpc.health.v1) instead."""

    path: str | None = Field(default=None, pattern=r"^/", max_length=1024)
    """Needed by HTTP backends."""
    grpc_service: str | None = Field(default=None, max_length=256)
    """The service a gRPC backend is asked about (default: the server as a whole)."""
    interval: Interval = "10s"
    timeout: Interval = "1s"
    healthy_threshold: int = Field(default=2, ge=1, le=100)
    unhealthy_threshold: int = Field(default=3, ge=1, le=100)


class OutlierDetection(WireModel):
    """Passive health: an endpoint that answers `consecutive5xx` errors in a row is ejected for a while."""

    consecutive_5xx: int = Field(default=5, ge=1, le=1000, alias="consecutive5xx")
    interval: Interval = "10s"
    base_ejection_time: Interval = "30s"
    max_ejection_percent: int = Field(default=10, ge=0, le=100)
    """Of the backend's endpoints; one may be ejected whatever this says."""


class CircuitBreaker(WireModel):
    """The most the gateway sends one backend at once, each per gateway; over a threshold, Envoy answers 503
    at once rather than queueing. Absent fields keep Envoy's defaults (1024 each, 3 retries)."""

    max_connections: int | None = Field(default=None, ge=1, le=1_000_000)
    max_pending_requests: int | None = Field(default=None, ge=1, le=1_000_000)
    max_requests: int | None = Field(default=None, ge=1, le=1_000_000)
    max_retries: int | None = Field(default=None, ge=0, le=1_000_000)


class BasicCredential(WireModel):
    username: str = Field(min_length=1, max_length=256, pattern=r"^[^:\r\n]+$")
    password: SealedValue
    """Write-only."""


class BearerCredential(WireModel):
    token: SealedValue
    """Write-only."""


class HeaderCredential(WireModel):
    header: HeaderName = "x-api-key"
    value: SealedValue
    """Write-only."""


class BackendCredential(WireModel):
    """What the gateway presents to the backend on every request, in place of anything the caller sent in
    that header: exactly one of HTTP basic, a bearer token, or a key in a header of its own. The secret part is
    write-only: reads show its digest, and Envoy holds it as an SDS secret, never in its listeners or clusters."""

    basic: BasicCredential | None = None
    bearer: BearerCredential | None = None
    api_key: HeaderCredential | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> BackendCredential:
        if sum(kind is not None for kind in (self.basic, self.bearer, self.api_key)) != 1:
            raise ValueError("give exactly one of basic, bearer or apiKey")
        return self
