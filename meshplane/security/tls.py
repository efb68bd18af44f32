"""gRPC credentials for the agent ↔ server link, from settings: mutual TLS unless told `insecure`.

The server uses the certificate files it is configured with, or else its own CA under
`<data-dir>/pki`, created on first start. The agent needs a certificate issued for its cluster
(`meshplane certs issue-agent`); without one it refuses to start and says how to get one.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc

from meshplane.config import AgentSettings, ServerSettings, split_address
from meshplane.observability.logging import get_logger
from meshplane.security.ca import (
    DEFAULT_SERVER_NAMES,
    CertificateFiles,
    Pki,
    PkiError,
    cluster_of_certificate,
    load_certificate,
)

log = get_logger("meshplane.security.tls")

RENEW_WARNING = timedelta(days=30)
_WILDCARD_HOSTS = {"", "0.0.0.0", "::", "*"}
INSECURE_WARNING = (
    "INSECURE: agent sync runs in plaintext and trusts the cluster each agent claims; "
    "any client can read and report for any cluster. Use only for local experiments."
)


class TlsConfigError(PkiError):
    """TLS is on but the files it needs are not configured or cannot be read."""


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise TlsConfigError(f"cannot read {what} {path}: {exc.strerror or exc}") from None


def _warn_if_expiring(path: Path, now: datetime | None = None) -> None:
    expires = load_certificate(path).not_valid_after_utc
    left = expires - (now or datetime.now(UTC))
    if left < RENEW_WARNING:
        message = "certificate expires soon" if left.total_seconds() > 0 else "certificate has expired"
        log.warning(message, certificate=str(path), not_after=expires.isoformat())


def server_names(settings: ServerSettings) -> list[str]:
    """What the server certificate must cover: the configured names and the host the gRPC port is on."""
    host, _ = split_address(settings.grpc_address)
    extra = [] if host in _WILDCARD_HOSTS or host in DEFAULT_SERVER_NAMES else [host]
    return list(dict.fromkeys([*settings.tls_server_names, *extra]))


def server_tls_files(settings: ServerSettings) -> CertificateFiles:
    """The configured certificate files, or the server's own PKI in its data directory (created if absent)."""
    if settings.tls_cert is not None and settings.tls_key is not None and settings.tls_ca is not None:
        return CertificateFiles(settings.tls_cert, settings.tls_key, settings.tls_ca)
    pki = Pki.of_data_dir(settings.data_dir)
    names = server_names(settings)
    created = not pki.server_files().certificate.exists()
    files = pki.ensure_server(names)
    if created:
        log.info("created the server certificate", pki=str(pki.directory), names=[*DEFAULT_SERVER_NAMES, *names])
    missing = pki.missing_server_names(names)
    if missing:
        log.warning(
            "the server certificate does not cover every configured name; agents dialling them will fail. "
            f"Remove {files.certificate} and {files.key} and restart to reissue it",
            missing=sorted(missing),
        )
    return files


def server_credentials(settings: ServerSettings) -> grpc.ServerCredentials:
    """TLS that requires a client certificate chaining to the CA."""
    files = server_tls_files(settings)
    key, certificate = _read(files.key, "server key"), _read(files.certificate, "server certificate")
    ca = _read(files.ca, "CA certificate")
    _warn_if_expiring(files.certificate)
    return grpc.ssl_server_credentials([(key, certificate)], root_certificates=ca, require_client_auth=True)


def agent_channel_credentials(settings: AgentSettings) -> grpc.ChannelCredentials | None:
    """The agent's client TLS for its cluster; None when `insecure`. TlsConfigError says what is missing."""
    if settings.insecure:
        return None
    flags = {"--tls-cert": settings.tls_cert, "--tls-key": settings.tls_key, "--tls-ca": settings.tls_ca}
    missing = [flag for flag, value in flags.items() if value is None]
    if missing:
        cluster = settings.cluster
        raise TlsConfigError(
            f"the agent of cluster {cluster!r} needs a client certificate ({', '.join(missing)} not set). "
            f"Issue one where the server's data directory is:\n"
            f"  meshplane certs issue-agent --cluster {cluster} --data-dir DATA_DIR --out DIR\n"
            f"then start the agent with --tls-cert DIR/{cluster}.crt --tls-key DIR/{cluster}.key --tls-ca DIR/ca.crt "
            "(or, against a server started with --insecure, with --insecure)"
        )
    assert settings.tls_cert is not None and settings.tls_key is not None and settings.tls_ca is not None
    certificate = _read(settings.tls_cert, "agent certificate")
    identity = cluster_of_certificate(load_certificate(settings.tls_cert))
    if identity != settings.cluster:
        raise TlsConfigError(
            f"{settings.tls_cert} is for cluster {identity!r}, but this agent runs as cluster {settings.cluster!r}"
            if identity
            else f"{settings.tls_cert} is not a meshplane agent certificate (it names no cluster)"
        )
    _warn_if_expiring(settings.tls_cert)
    return grpc.ssl_channel_credentials(
        root_certificates=_read(settings.tls_ca, "CA certificate"),
        private_key=_read(settings.tls_key, "agent key"),
        certificate_chain=certificate,
    )


def agent_channel_options(settings: AgentSettings) -> list[tuple[str, str]]:
    """Channel options for TLS: the name to check the server certificate against, when it is not the address."""
    if settings.insecure or not settings.tls_server_name:
        return []
    return [("grpc.ssl_target_name_override", settings.tls_server_name)]
