"""gRPC credentials for the agent ↔ server link, from settings: mutual TLS unless told `insecure`.

The server uses the certificate files it is configured with, or else its own CA under
`<data-dir>/pki`, created on first start. The agent needs a certificate issued for its cluster
(`meshplane certs issue-agent`); without one it refuses to start and says how to get one.

Both read their files again when they change (a renewal, a rotated Secret): new connections get the
new certificate, and the connections and streams already up go on with theirs. The north API's HTTPS
certificate is read again the same way.
"""

from __future__ import annotations

import asyncio
import os
import ssl
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
    load_pair,
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


NORTH_RELOAD_EVERY = 2.0
"""Seconds between two looks at the north API's certificate files."""


class FileChanges:
    """Tells whether any of some files changed since it last looked (inode, size, modification time): a few
    `stat` calls, cheap enough to ask at every TLS handshake."""

    def __init__(self, *paths: Path):
        self.paths = paths
        self._seen = self._signature()

    def _signature(self) -> tuple[tuple[int, int, int] | None, ...]:
        signature = []
        for path in self.paths:
            try:
                status = os.stat(path)
            except OSError:
                signature.append(None)
                continue
            signature.append((status.st_ino, status.st_size, status.st_mtime_ns))
        return tuple(signature)

    def changed(self) -> bool:
        current = self._signature()
        if current == self._seen:
            return False
        self._seen = current
        return True


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


def _server_configuration(files: CertificateFiles) -> grpc.ServerCertificateConfiguration:
    """The server's certificate, key and CA as gRPC takes them; TlsConfigError / PkiError when they are
    unreadable or the key is not the certificate's."""
    key, certificate = _read(files.key, "server key"), _read(files.certificate, "server certificate")
    ca = _read(files.ca, "CA certificate")
    load_pair(files.certificate, files.key)
    _warn_if_expiring(files.certificate)
    return grpc.ssl_server_certificate_configuration([(key, certificate)], root_certificates=ca)


class ServerCertificateReload:
    """Asked by gRPC at every handshake: the server's files anew once they changed, else None (keep them).

    A pair caught half-replaced (a certificate without its key yet) is skipped: the next change, the key
    landing, brings both.
    """

    def __init__(self, files: CertificateFiles):
        self.files = files
        self._changes = FileChanges(files.certificate, files.key, files.ca)

    def __call__(self) -> grpc.ServerCertificateConfiguration | None:
        if not self._changes.changed():
            return None
        try:
            configuration = _server_configuration(self.files)
        except PkiError as exc:
            log.warning(
                "the changed server certificate files do not load; new connections keep the last ones", error=str(exc)
            )
            return None
        log.info("server certificate files changed; new connections get them", certificate=str(self.files.certificate))
        return configuration


def server_credentials(settings: ServerSettings) -> grpc.ServerCredentials:
    """TLS that requires a client certificate chaining to the CA, read again when its files change."""
    files = server_tls_files(settings)
    return grpc.dynamic_ssl_server_credentials(
        _server_configuration(files), ServerCertificateReload(files), require_client_authentication=True
    )


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
    _read(settings.tls_key, "agent key")
    identity = cluster_of_certificate(load_pair(settings.tls_cert, settings.tls_key).certificate)
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


class AgentCredentials:
    """The agent's client TLS, read again once its files change; None throughout when `insecure`."""

    def __init__(self, settings: AgentSettings):
        self.settings = settings
        self.current = agent_channel_credentials(settings)
        files = (settings.tls_cert, settings.tls_key, settings.tls_ca)
        self._changes = None if self.current is None else FileChanges(*(f for f in files if f is not None))

    def renewed(self) -> grpc.ChannelCredentials | None:
        """New credentials if the files changed since the last look and hold a certificate of this cluster with
        its key; else None (keep the current ones)."""
        if self._changes is None or not self._changes.changed():
            return None
        try:
            self.current = agent_channel_credentials(self.settings)
        except PkiError as exc:
            log.warning("the changed agent certificate files do not load; keeping the last ones", error=str(exc))
            return None
        log.info("agent certificate files changed; new connections use them", certificate=str(self.settings.tls_cert))
        return self.current


async def keep_north_certificate_fresh(
    context: ssl.SSLContext, certificate: Path, key: Path, every: float = NORTH_RELOAD_EVERY
) -> None:
    """Load the north API's certificate into `context` again whenever its files change: handshakes from then
    on present it, connections already up keep theirs. Files that do not load leave the last ones in use."""
    changes = FileChanges(certificate, key)
    while True:
        await asyncio.sleep(every)
        if not changes.changed():
            continue
        try:
            context.load_cert_chain(certificate, key)
        except (OSError, ssl.SSLError) as exc:
            log.warning("the changed north API certificate files do not load; keeping the last ones", error=str(exc))
            continue
        log.info("north API certificate files changed; new connections get them", certificate=str(certificate))


def agent_channel_options(settings: AgentSettings) -> list[tuple[str, str]]:
    """Channel options for TLS: the name to check the server certificate against, when it is not the address."""
    if settings.insecure or not settings.tls_server_name:
        return []
    return [("grpc.ssl_target_name_override", settings.tls_server_name)]
