"""API management: how an API authenticates callers and limits them, and the consumer-side kinds
(Application, Subscription, RateLimitPolicy) plus the server-written credential records."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any

from pydantic import AfterValidator, AnyHttpUrl, Field, field_validator, model_validator

from meshplane.model.base import WireModel
from meshplane.model.durations import Duration
from meshplane.model.meta import Name
from meshplane.model.pem import PemCertificates

_HEADER = re.compile(r"^[a-z0-9!#$%&'*+.^_`|~-]+$")
_SCOPE = re.compile(r"^[\x21\x23-\x5b\x5d-\x7e]+$")
_ORIGIN = re.compile(r"^(\*|https?://(\*\.)?[a-z0-9.-]+(:\d{1,5})?)$")
_RESERVED_HEADERS = ("x-meshplane-", ":")


def _check_header(value: str) -> str:
    value = value.lower()
    if not _HEADER.match(value) or value.startswith(_RESERVED_HEADERS):
        raise ValueError(f"{value!r} is not a header name this gateway lets callers use")
    return value


def _check_scope(value: str) -> str:
    if not _SCOPE.match(value):
        raise ValueError(f"{value!r} is not an OAuth scope (printable, no spaces or quotes)")
    return value


def _check_origin(value: str) -> str:
    if not _ORIGIN.match(value):
        raise ValueError(f"{value!r} is not '*' or an origin such as https://app.example.com")
    return value


HeaderName = Annotated[str, AfterValidator(_check_header)]
Scope = Annotated[str, AfterValidator(_check_scope)]
Origin = Annotated[str, AfterValidator(_check_origin)]


class RateUnit(StrEnum):
    SECOND = "second"
    MINUTE = "minute"
    HOUR = "hour"
    DAY = "day"

    @property
    def seconds(self) -> int:
        return {"second": 1, "minute": 60, "hour": 3600, "day": 86400}[self.value]


class LimitScope(StrEnum):
    LOCAL = "local"
    """Each gateway counts on its own (Envoy's local_ratelimit): no service on the request path."""
    GLOBAL = "global"
    """Every gateway shares one count, kept by the rate limiter."""


class RateLimit(WireModel):
    requests_per_unit: int = Field(ge=1, le=1_000_000_000)
    unit: RateUnit
    scope: LimitScope = LimitScope.LOCAL


class KeyMode(StrEnum):
    SIGNED = "signed"
    """Keys the control plane signs; every gateway checks them natively (jwt_authn + RBAC)."""
    OPAQUE = "opaque"
    """Keys checked by the enforcer against digests (for keys that are not ours to sign)."""


class ApiKeyAuth(WireModel):
    """Where a caller's API key travels: a header, or a query parameter, or either."""

    header: HeaderName | None = None
    query: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._~-]+$")
    mode: KeyMode = KeyMode.SIGNED

    @model_validator(mode="after")
    def _somewhere(self) -> ApiKeyAuth:
        if self.header is None and self.query is None:
            object.__setattr__(self, "header", "x-api-key")
        return self


class JwtIssuer(WireModel):
    """One identity provider whose tokens an API accepts: who signs them, and for whom."""

    issuer: str = Field(min_length=1)
    audiences: list[str] = Field(default_factory=list)
    jwks: str | None = None
    """The provider's JSON Web Key Set, inline."""
    jwks_uri: AnyHttpUrl | None = None
    """Or where to fetch it from; the gateway caches it. Over HTTPS the server is verified for the URI's host."""
    jwks_ca_certificates: PemCertificates | None = None
    """PEM certificates of the CAs an https jwksUri is verified against; default: the gateways' system store."""

    @field_validator("jwks")
    @classmethod
    def _key_set(cls, text: str | None) -> str | None:
        if text is None:
            return None
        try:
            keys = json.loads(text).get("keys")
        except (ValueError, AttributeError, RecursionError):  # RecursionError: nesting deeper than json can parse
            keys = None
        if not isinstance(keys, list) or not keys:
            raise ValueError('must be a JSON Web Key Set: {"keys": [...]}')
        return text

    @model_validator(mode="after")
    def _one_key_source(self) -> JwtIssuer:
        if (self.jwks is None) == (self.jwks_uri is None):
            raise ValueError("give exactly one of jwks (inline) and jwksUri")
        return self


ClaimName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")]


class JwtAuth(JwtIssuer):
    """User and client tokens (bearer JWTs) from identity providers, checked natively by the gateway: the
    issuer above, and any of `additionalIssuers`."""

    additional_issuers: list[JwtIssuer] = Field(default_factory=list)
    """Other providers whose tokens this API accepts as well (a token is checked against its own issuer's keys)."""
    header: HeaderName = "authorization"
    """The header carrying `Bearer <token>`."""
    scopes_claim: str = Field(default="scope", min_length=1)
    """Claim holding the token's scopes: a space-separated string or a list."""
    require_subscription: bool = False
    """Admit a token only when its client (an Application's `clientIds`, by issuer) is subscribed to the API:
    the subscription's plan, its limits and blocking then apply as they do to API keys."""
    client_id_claims: list[ClaimName] = Field(default_factory=lambda: ["azp", "client_id"], min_length=1)
    """The claims that name the token's client, any one of them (OpenID Connect's `azp`, RFC 9068's `client_id`)."""

    def issuers(self) -> list[JwtIssuer]:
        """Every provider this API accepts, the first one first."""
        first = JwtIssuer(
            issuer=self.issuer,
            audiences=self.audiences,
            jwks=self.jwks,
            jwks_uri=self.jwks_uri,
            jwks_ca_certificates=self.jwks_ca_certificates,
        )
        return [first, *self.additional_issuers]

    @model_validator(mode="after")
    def _distinct_issuers(self) -> JwtAuth:
        names = [issuer.issuer for issuer in self.issuers()]
        if len(set(names)) != len(names):
            raise ValueError("each issuer may be given once")
        return self


class MtlsAuth(WireModel):
    """The caller's verified client certificate as a credential: it counts as the Application whose
    `clientCertificates` name it. Served only on Gateway listeners that verify client certificates."""

    required: bool = True
    """Beside an API key or a token: true, both are needed (and must name the same application); false,
    either one is enough. Alone, the certificate is the only credential and must be required."""


class Authentication(WireModel):
    """Absent: anyone may call. At most one of apiKey (applications) and jwt (users), plus or instead mtls
    (client certificates); at least one of the three."""

    api_key: ApiKeyAuth | None = None
    jwt: JwtAuth | None = None
    mtls: MtlsAuth | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Authentication:
        if self.api_key is not None and self.jwt is not None:
            raise ValueError("give at most one of apiKey and jwt")
        if self.mtls is None:
            if self.api_key is None and self.jwt is None:
                raise ValueError("give one of apiKey, jwt and mtls")
            return self
        if self.api_key is None and self.jwt is None and not self.mtls.required:
            raise ValueError("mtls.required: a client certificate alone must be required")
        if self.api_key is not None and self.api_key.mode is KeyMode.OPAQUE:
            raise ValueError("mtls combines with signed API keys only (apiKey.mode: signed)")
        if self.jwt is not None and not self.jwt.require_subscription:
            raise ValueError("mtls combines with jwt only when jwt.requireSubscription names the application")
        return self


class Cors(WireModel):
    """Which browser origins may call the API; preflights are answered at the gateway."""

    allow_origins: list[Origin] = Field(min_length=1)
    allow_methods: list[str] = Field(default_factory=list)
    allow_headers: list[HeaderName] = Field(default_factory=list)
    expose_headers: list[HeaderName] = Field(default_factory=list)
    max_age: Duration | None = None
    allow_credentials: bool = False


class ClientId(WireModel):
    """How an identity provider names an application in the tokens it issues to it."""

    issuer: str = Field(min_length=1)
    client_id: str = Field(min_length=1, max_length=256)


class ClientCertificate(WireModel):
    """How a client certificate is recognised as an application's, by exactly one of: its subject (RFC 4514,
    most specific first, e.g. `CN=orders-client,O=Shop`), one of its SANs (a URI or DNS name), or the SHA-256
    fingerprint of the certificate (hex, colons allowed)."""

    subject: str | None = Field(
        default=None, min_length=3, max_length=1024, pattern=r"^[^\x00-\x1f\x7f=]+=[^\x00-\x1f\x7f]*$"
    )
    san: str | None = Field(default=None, min_length=1, max_length=1024, pattern=r"^[^\s\x00-\x1f\x7f=,;\"]+$")
    fingerprint: str | None = None

    @field_validator("fingerprint")
    @classmethod
    def _sha256(cls, value: str | None) -> str | None:
        if value is None:
            return None
        digest = value.replace(":", "").lower()
        if not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise ValueError("must be a SHA-256 fingerprint: 64 hex digits, colons allowed")
        return digest

    @model_validator(mode="after")
    def _one_way(self) -> ClientCertificate:
        if sum(value is not None for value in (self.subject, self.san, self.fingerprint)) != 1:
            raise ValueError("give exactly one of subject, san and fingerprint")
        return self


class ApplicationSpec(WireModel):
    """A consumer of APIs. Its keys are made with POST .../applications/{name}/keys, never written here; its
    `clientIds` make tokens that identity providers issue to it count as it, for APIs that require a subscription;
    its `clientCertificates` do the same for client certificates, on APIs with `authentication.mtls`."""

    description: str = ""
    owner: str | None = None
    client_ids: list[ClientId] = Field(default_factory=list)
    client_certificates: list[ClientCertificate] = Field(default_factory=list)

    @model_validator(mode="after")
    def _distinct_client_ids(self) -> ApplicationSpec:
        pairs = [(client.issuer, client.client_id) for client in self.client_ids]
        if len(set(pairs)) != len(pairs):
            raise ValueError("each client id may be given once per issuer")
        if len(set(self.client_certificates)) != len(self.client_certificates):
            raise ValueError("each client certificate may be given once")
        return self


class SubscriptionState(StrEnum):
    ACTIVE = "active"
    BLOCKED = "blocked"


class SubscriptionSpec(WireModel):
    application: Name
    api: Name
    plan: Name = "default"
    state: SubscriptionState = SubscriptionState.ACTIVE


class TargetKind(StrEnum):
    API = "API"
    OPERATION = "Operation"
    SUBSCRIPTION_PLAN = "SubscriptionPlan"


class OperationRef(WireModel):
    method: str
    path: str


class PolicyTarget(WireModel):
    """An API (name), one operation of an API (name + operation), or a plan (name), optionally on one API."""

    kind: TargetKind
    name: Name
    operation: OperationRef | None = None
    api: Name | None = None

    @model_validator(mode="after")
    def _shape(self) -> PolicyTarget:
        if (self.kind is TargetKind.OPERATION) != (self.operation is not None):
            raise ValueError("operation is given exactly when kind is Operation")
        if self.api is not None and self.kind is not TargetKind.SUBSCRIPTION_PLAN:
            raise ValueError("api narrows a SubscriptionPlan target; for API and Operation targets use name")
        return self


class RateLimitPolicySpec(WireModel):
    """Requests per unit for an API, an operation or each subscription of a plan (per application)."""

    target: PolicyTarget
    requests_per_unit: int = Field(ge=1, le=1_000_000_000)
    unit: RateUnit
    scope: LimitScope = LimitScope.GLOBAL

    def limit(self) -> RateLimit:
        return RateLimit(requests_per_unit=self.requests_per_unit, unit=self.unit, scope=self.scope)


class ApplicationKeySpec(WireModel):
    """What the server keeps of one API key: enough to check and revoke it, never enough to rebuild it."""

    application: Name
    application_uid: str | None = None
    """The uid of the application it was issued to: a later application of the same name is another one, and
    the key never works for it. None on records written before keys were bound to it."""
    created: str
    expires: str | None = None
    revoked: bool = False
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    """Digest of the key as callers send it, for the enforcer's opaque-key lookups."""
    signing_key_id: str | None = None
    """The signing key it was issued under; None for an imported opaque key."""
    token_expires: str | None = None
    """The `exp` the signed key carries, which a rotation does not change (it shortens `expires`): past it,
    the key is refused by its signature check, so the gateways need not list it as revoked."""


def readable(obj: Mapping[str, Any]) -> dict[str, Any]:
    """An object (wire form) as any read shows it: a key record without its digest. Only the enforcer needs
    the digest, and a digest of a weak imported key can be searched for the key."""
    if obj.get("kind") != "ApplicationKey":
        return dict(obj)
    return {**obj, "spec": {field: value for field, value in obj.get("spec", {}).items() if field != "sha256"}}


class KeySetSpec(WireModel):
    """The public keys that API keys are signed with (a JWKS); every gateway receives it."""

    issuer: str
    keys: list[dict[str, Any]] = Field(default_factory=list)
