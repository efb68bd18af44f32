"""Typed configuration of every process: TOML file (`--config`), `MESHPLANE_*` variables, then flags.

Precedence, highest first: command-line flags, environment, the TOML file, defaults. The defaults run
the embedded setup on localhost.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

LogFormat = Literal["json", "text"]
SYSTEM_CA_FILE = "/etc/ssl/certs/ca-certificates.crt"
"""Where Debian, Ubuntu and Alpine (and Envoy's own images) keep the system's trusted CAs."""


def split_address(address: str) -> tuple[str, int]:
    """`host:port` (or `[v6]:port`) into its parts; ValueError names the bad address."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{address!r} is not host:port")
    return host.strip("[]"), int(port)


def _address(value: str) -> str:
    split_address(value)
    return value


Address = Annotated[str, AfterValidator(_address)]


def _server_addresses(value: str) -> str:
    """One `host:port`, whose name may resolve to several replicas, or several replicas' `ip:port` separated
    by commas (names are left to DNS: one name with several A records)."""
    addresses = [address.strip() for address in value.split(",")]
    hosts = [split_address(address)[0] for address in addresses]
    if len(addresses) == 1:
        return addresses[0]
    try:
        versions = {ipaddress.ip_address(host).version for host in hosts}
    except ValueError:
        raise ValueError(
            f"{value!r}: several server addresses are IP addresses (for names, give one with several A records)"
        ) from None
    if len(versions) > 1:
        raise ValueError(f"{value!r}: several server addresses are all IPv4 or all IPv6")
    if twice := sorted({address for address in addresses if addresses.count(address) > 1}):
        raise ValueError(f"{twice[0]!r} is named twice")
    return ",".join(addresses)


ServerAddresses = Annotated[str, AfterValidator(_server_addresses)]
"""The agent's server: one address, or several replicas' IP addresses separated by commas."""


def _access_log_target(value: str) -> str:
    if value not in ("stdout", "off") and not Path(value).is_absolute():
        raise ValueError(f'{value!r} is not "stdout", "off" or an absolute path')
    return value


AccessLogTarget = Annotated[str, AfterValidator(_access_log_target)]
OtlpEndpoint = Annotated[
    str | None,
    Field(description="OTLP gRPC collector for traces (http://127.0.0.1:4317); default $OTEL_EXPORTER_OTLP_ENDPOINT"),
]


class ProcessSettings(BaseSettings):
    """What every meshplane process shares: how it logs and where its config file is."""

    model_config = SettingsConfigDict(env_prefix="MESHPLANE_", env_nested_delimiter="__", extra="forbid")
    config_file: ClassVar[Path | None] = None

    log_format: LogFormat = "json"
    log_level: str = "info"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if cls.config_file is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=cls.config_file))
        return tuple(sources)

    @classmethod
    def load(cls, config_file: Path | None = None, **flags: Any) -> Self:
        """Settings from the file, the environment and the flags that were given (None = not given)."""
        if config_file is not None and not config_file.is_file():
            raise FileNotFoundError(f"config file {config_file} does not exist")
        bound = type(cls.__name__, (cls,), {"config_file": config_file})
        return bound(**{k: v for k, v in flags.items() if v is not None})  # type: ignore[return-value]


class DataPlaneServiceSettings(ProcessSettings):
    """What the enforcer and the rate limiter share: the agent that feeds them, and how they show up."""

    role: ClassVar[str]
    xds_address: Address = Field(default="127.0.0.1:18001", description="the local agent's xDS")
    node_id: str = Field(
        default="", validate_default=True, description="xDS node id announced to the agent; default ROLE-HOST-PID"
    )
    metrics_address: Address | None = Field(default=None, description="serve Prometheus /metrics here; default off")

    @field_validator("node_id")
    @classmethod
    def _default_node_id(cls, value: str) -> str:
        return value or f"{cls.role}-{socket.gethostname()}-{os.getpid()}"


class ServerSettings(ProcessSettings):
    http_address: Address = "127.0.0.1:8080"
    grpc_address: Address = "127.0.0.1:18000"
    otlp_endpoint: OtlpEndpoint = None
    data_dir: Path = Path(".meshplane")
    database_url: str | None = Field(
        default=None, description="SQLAlchemy URL; default: SQLite file meshplane.db in data_dir"
    )
    insecure: bool = Field(default=False, description="plaintext agent sync, no client identity: experiments only")
    tls_cert: Path | None = Field(default=None, description="server certificate; default: data_dir/pki, created")
    tls_key: Path | None = None
    tls_ca: Path | None = Field(default=None, description="CA that agent certificates must chain to")
    tls_server_names: list[str] = Field(
        default_factory=list, description="extra DNS names / IPs for the server certificate created in data_dir/pki"
    )

    trust_domain: str = Field(
        default="cluster.local",
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
        description="Istio's trust domain (meshConfig.trustDomain) of every cluster: rendered principals begin with it",
    )

    sealing_key_file: Path | None = Field(
        default=None,
        description="the 32-byte data key write-only fields are encrypted with (every replica the same); "
        "default: data_dir/sealing/data-key, created",
    )

    http_tls_cert: Path | None = Field(default=None, description="serve the north API over HTTPS with this certificate")
    http_tls_key: Path | None = Field(default=None, description="its key (with http_tls_cert)")

    @model_validator(mode="after")
    def _tls_files_together(self) -> Self:
        given = {"tls_cert": self.tls_cert, "tls_key": self.tls_key, "tls_ca": self.tls_ca}
        if any(given.values()) and not all(given.values()):
            missing = ", ".join(name for name, value in given.items() if value is None)
            raise ValueError(f"tls_cert, tls_key and tls_ca go together; missing: {missing}")
        if (self.http_tls_cert is None) != (self.http_tls_key is None):
            raise ValueError("http_tls_cert and http_tls_key go together")
        return self

    event_retention: float = Field(default=86_400.0, gt=0, description="seconds the event log keeps events")
    compaction_interval: float = Field(default=60.0, gt=0, description="seconds between compactions")
    rollout_interval: float = Field(
        default=0.5, gt=0, description="most seconds between two looks at each rollout (reports wake it sooner)"
    )
    history_keep: int = Field(default=100, ge=0, description="versions of each object history keeps (0: all)")
    audit_keep_days: float = Field(default=90.0, gt=0, description="days the audit trail keeps an entry")
    keepalive_interval: float = Field(default=10.0, gt=0, description="seconds of silence before pinging an agent")
    keepalive_timeout: float = Field(default=10.0, gt=0, description="seconds to wait for its answer")
    admin_token: SecretStr | None = Field(
        default=None, description="an admin bearer token to accept (mpt_<id>_<secret>); default: one is made"
    )
    metrics_need_token: bool = Field(default=False, description="/metrics asks for a bearer token too")
    max_body_bytes: int = Field(default=1 << 20, ge=1024, description="largest request body the north API takes")
    failed_auth_per_minute: int = Field(default=30, ge=1, description="failed authentications a client may make")
    oidc_issuer: str | None = Field(default=None, description="accept user JWTs from this OpenID issuer")
    oidc_audience: str | None = Field(
        default=None, description="what the JWTs' aud must name (meshplane's client id); required with oidc_issuer"
    )
    oidc_jwks_uri: str | None = Field(default=None, description="the issuer's key set URL")
    oidc_jwks: str | None = Field(default=None, description="or its key set, inline JSON")
    oidc_roles_claim: str = Field(default="meshplane_roles", description="claim listing role or role:project")
    oidc_console_client_id: str | None = Field(
        default=None,
        description="the web console's client id at the issuer: /ui/ offers signing in with it, and the "
        "id_tokens it gets (aud: this id) are accepted",
    )
    oidc_console_name: str | None = Field(default=None, description="the provider's name on the sign-in button")
    oidc_authorization_endpoint: str | None = Field(
        default=None, description="for the console; default: from the issuer's discovery document"
    )
    oidc_token_endpoint: str | None = Field(
        default=None, description="for the console; default: from the issuer's discovery document"
    )

    @model_validator(mode="after")
    def _oidc_keys(self) -> Self:
        if self.oidc_issuer is not None and (self.oidc_jwks_uri is None) == (self.oidc_jwks is None):
            raise ValueError("with oidc_issuer, give exactly one of oidc_jwks_uri and oidc_jwks")
        if self.oidc_console_client_id is not None and self.oidc_issuer is None:
            raise ValueError("oidc_console_client_id needs oidc_issuer: the provider the console signs in with")
        if self.oidc_issuer is not None and not (self.oidc_audience or self.oidc_console_client_id):
            raise ValueError(
                "with oidc_issuer, set oidc_audience (MESHPLANE_OIDC_AUDIENCE): without it a token the issuer "
                "signed for any other application would be accepted"
            )
        return self

    @property
    def store_url(self) -> str:
        return self.database_url or f"sqlite+aiosqlite:///{(self.data_dir / 'meshplane.db').resolve()}"


class RetryPolicy(BaseModel):
    """gRPC's own retry policy for the agent's upward calls (service config `retryPolicy`)."""

    model_config = ConfigDict(extra="forbid")

    max_attempts: int = Field(default=5, ge=2, le=5)
    initial_backoff: float = Field(default=0.2, gt=0, description="seconds")
    max_backoff: float = Field(default=5.0, gt=0, description="seconds")
    backoff_multiplier: float = Field(default=2.0, gt=0)
    retryable_status_codes: list[str] = Field(default_factory=lambda: ["UNAVAILABLE", "RESOURCE_EXHAUSTED"])

    def service_config(self, service: str) -> str:
        """The channel's service config JSON applying this policy to every method of `service`."""
        policy = {
            "maxAttempts": self.max_attempts,
            "initialBackoff": f"{self.initial_backoff}s",
            "maxBackoff": f"{self.max_backoff}s",
            "backoffMultiplier": self.backoff_multiplier,
            "retryableStatusCodes": self.retryable_status_codes,
        }
        return json.dumps({"methodConfig": [{"name": [{"service": service}], "retryPolicy": policy}]})


FailureMode = Literal["open", "closed"]
GlobalLimits = Literal["exact", "quota"]


class AgentSettings(ProcessSettings):
    cluster: str = "default"
    server: ServerAddresses = "127.0.0.1:18000"
    state_dir: Path = Path(".meshplane-agent")
    xds_address: Address = "127.0.0.1:18001"
    gateway_address: Address = "127.0.0.1:10000"
    admin_address: Address = Field(
        default="127.0.0.1:18003", description="admin HTTP: /config_dump, /metrics, /healthz"
    )
    admin_token_file: Path | None = Field(
        default=None,
        description="bearer token /config_dump asks for; default: none on loopback, else one made in "
        "state_dir/admin-token",
    )
    labels: dict[str, str] = Field(default_factory=dict)
    otlp_endpoint: OtlpEndpoint = None
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    insecure: bool = Field(default=False, description="plaintext sync to a server started with --insecure")
    tls_cert: Path | None = Field(default=None, description="this cluster's certificate (meshplane certs issue-agent)")
    tls_key: Path | None = None
    tls_ca: Path | None = Field(default=None, description="the server's CA certificate")
    tls_server_name: str | None = Field(default=None, description="name to verify the server certificate against")
    kubeconfig: Path | None = Field(
        default=None, description="apply delivered objects to this cluster's Kubernetes with this kubeconfig"
    )
    in_cluster: bool | None = Field(
        default=None,
        description="without a kubeconfig, reach this cluster's Kubernetes as the pod's service account: "
        "true, false, or unset to do so when running in a pod",
    )
    gateway_api: bool = Field(
        default=True,
        description="with Kubernetes, serve the cluster's Gateway API objects (GatewayClasses of "
        "meshplane.io/gateway-controller) and write their status",
    )
    gateway_api_addresses: str | None = Field(
        default=None,
        description="the addresses Gateways are served on, each its own (e.g. 127.0.0.10-127.0.0.60 or a CIDR); "
        "default: every Gateway on gateway_address's host",
    )

    @model_validator(mode="after")
    def _replicas_share_a_name(self) -> Self:
        """Every replica's certificate is checked against one name: several addresses give no single host."""
        if "," in self.server and not self.insecure and not self.tls_server_name:
            raise ValueError(
                "several server addresses need tls_server_name (--tls-server-name): the name every replica's "
                "certificate carries"
            )
        return self

    @field_validator("gateway_api_addresses")
    @classmethod
    def _address_pool(cls, value: str | None) -> str | None:
        from meshplane.agent.gatewayapi_addresses import parse_pool

        if value is not None:
            parse_pool(value)  # ValueError: the settings say what is wrong with it
        return value

    enforcer_address: Address | None = Field(
        default=None, description="the enforcer the gateways ask about opaque API keys (e.g. 127.0.0.1:18081)"
    )
    keys_filter: Path | None = Field(
        default=None,
        description="the keys filter's .wasm on the gateways' host (scripts/build-keys-filter): opaque API keys "
        "are then checked inside Envoy, and the enforcer is not asked",
    )
    ratelimiter_address: Address | None = Field(
        default=None, description="the rate limiter the gateways ask about global limits (e.g. 127.0.0.1:18082)"
    )
    enforcer_failure_mode: FailureMode = Field(
        default="closed", description="when the enforcer cannot answer: closed (refuse, 503) or open"
    )
    ratelimiter_failure_mode: FailureMode = Field(
        default="open", description="when the rate limiter cannot answer: open (let through) or closed"
    )
    global_limits: GlobalLimits = Field(
        default="exact",
        description="global API and operation limits: exact (the rate limiter asked per request) or quota "
        "(each gateway enforces a share it is assigned, reporting its use: no call per request)",
    )
    east_west_gateway: Address | None = Field(
        default=None, description="where other clusters reach this cluster's services; reported with them"
    )
    cluster_domain: str = Field(
        default="cluster.local", description="DNS domain of the cluster's services (<service>.<namespace>.svc.<domain>)"
    )
    allow_loopback_backends: bool = Field(
        default=False,
        description="let API backends target this host's loopback (local setups); the agent's and Envoy's "
        "admin and xDS ports stay refused",
    )
    jwks_ca_file: str = Field(
        default=SYSTEM_CA_FILE,
        description="CA bundle on the gateways' hosts that HTTPS key sets (JWKS) are verified against, "
        "when an API names no CA of its own",
    )
    xff_num_trusted_hops: int = Field(
        default=0, ge=0, description="proxies in front of the gateways whose x-forwarded-for entries are trusted"
    )
    envoy_admin_address: Address = Field(
        default="127.0.0.1:19000",
        description="the gateways' Envoy admin (meshplane agent bootstrap --admin-port); no backend may target it",
    )
    more_envoy_admin_addresses: list[Address] = Field(
        default_factory=list,
        description="the Envoy admins of further gateways this agent serves: their figures are read and summed "
        "with the first's; no backend may target them",
    )
    figures_interval: float = Field(
        default=5.0, gt=0, description="seconds between two readings of the gateways' per-API figures"
    )
    access_log: AccessLogTarget = Field(
        default="stdout",
        description='where the gateways write one JSON line per request: "stdout", an absolute file path, or "off"',
    )
    access_log_otlp_endpoint: Address | None = Field(
        default=None, description="an OTLP gRPC collector (host:port) the gateways also send their access logs to"
    )
