"""The server's certificate authority: one CA, the server's certificate, one client certificate per cluster.

Issuing is pure (keys and certificates in, certificates out, the clock a parameter); `Pki` keeps them
as PEM files under `<data-dir>/pki/`:

    ca.crt  ca.key (0600)  server.crt  server.key (0600)  agents/<cluster>.crt  agents/<cluster>.key (0600)

An agent's identity is its cluster: the URI SAN ``spiffe://meshplane/cluster/<name>`` (and CN = name).
Existing files are loaded, never replaced behind the operator's back: a half-present or mismatched pair
is an error that names the files, because silently minting a new CA would lock every issued agent out.
Leaf certificates are replaced only when asked to (`reissue_*`), each file atomically, so a process
that reads them again on change never sees half a file.
"""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes, CertificatePublicKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from meshplane import secret_files
from meshplane.model.meta import check_name

CLUSTER_URI_PREFIX = "spiffe://meshplane/cluster/"
SERVER_URI = "spiffe://meshplane/server"
CA_VALIDITY = timedelta(days=3650)
LEAF_VALIDITY = timedelta(days=365)
# Certificates start a little in the past so that a peer whose clock lags accepts them at once.
CLOCK_SKEW = timedelta(minutes=5)
DEFAULT_SERVER_NAMES = ("localhost", "127.0.0.1")


class PkiError(Exception):
    """A certificate or key is missing, incomplete, unreadable or does not match; the message says what to do."""


@dataclass(frozen=True)
class KeyPair:
    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    def certificate_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )


@dataclass(frozen=True)
class CertificateFiles:
    """Where a certificate, its key and the CA that verifies its peers are on disk."""

    certificate: Path
    key: Path
    ca: Path


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _subject(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "meshplane"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _now(now: datetime | None) -> datetime:
    return now if now is not None else datetime.now(UTC)


def create_ca(now: datetime | None = None) -> KeyPair:
    """A new self-signed CA that may sign leaf certificates only (path length 0)."""
    key = _new_key()
    name = _subject("meshplane CA")
    start = _now(now) - CLOCK_SKEW
    certificate = authority_certificate(name, key.public_key(), name, key, start, start + CA_VALIDITY, path_length=0)
    return KeyPair(certificate, key)


def authority_certificate(
    subject: x509.Name,
    public_key: CertificatePublicKeyTypes,
    issuer: x509.Name,
    signer: CertificateIssuerPrivateKeyTypes,
    not_before: datetime,
    not_after: datetime,
    *,
    path_length: int,
    digital_signature: bool = False,
) -> x509.Certificate:
    """A CA certificate for `subject`, signed by `signer` (its own key when self-signed): it may sign
    certificates and revocation lists, and CAs below it down to `path_length` more levels."""
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=digital_signature,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()), critical=False)
        .sign(signer, hashes.SHA256())
    )


def _issue(
    ca: KeyPair,
    common_name: str,
    names: list[x509.GeneralName],
    usage: x509.ObjectIdentifier,
    now: datetime | None,
) -> KeyPair:
    key = _new_key()
    start = _now(now) - CLOCK_SKEW
    end = min(start + LEAF_VALIDITY, ca.certificate.not_valid_after_utc)
    public = key.public_key()
    certificate = (
        x509.CertificateBuilder()
        .subject_name(_subject(common_name))
        .issuer_name(ca.certificate.subject)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=True,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
            critical=False,
        )
        .sign(ca.key, hashes.SHA256())
    )
    return KeyPair(certificate, key)


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def issue_server_certificate(ca: KeyPair, names: Iterable[str] = (), now: datetime | None = None) -> KeyPair:
    """The server's certificate: valid for localhost, 127.0.0.1 and `names` (DNS names or IP addresses)."""
    all_names = list(dict.fromkeys([*DEFAULT_SERVER_NAMES, *names]))
    general = [_general_name(n) for n in all_names] + [x509.UniformResourceIdentifier(SERVER_URI)]
    return _issue(ca, "meshplane server", general, ExtendedKeyUsageOID.SERVER_AUTH, now)


def issue_agent_certificate(ca: KeyPair, cluster: str, now: datetime | None = None) -> KeyPair:
    """A client certificate whose identity is `cluster` (a DNS-1123 label)."""
    check_name(cluster)
    uri = x509.UniformResourceIdentifier(CLUSTER_URI_PREFIX + cluster)
    return _issue(ca, cluster, [uri], ExtendedKeyUsageOID.CLIENT_AUTH, now)


def _sans(certificate: x509.Certificate) -> x509.SubjectAlternativeName | None:
    try:
        return certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return None


def cluster_of_uris(uris: Iterable[str]) -> str | None:
    """The cluster named by a certificate's URI SANs; None when none (or more than one) names a cluster."""
    clusters = {uri.removeprefix(CLUSTER_URI_PREFIX) for uri in uris if uri.startswith(CLUSTER_URI_PREFIX)}
    if len(clusters) != 1:
        return None
    (cluster,) = clusters
    try:
        return check_name(cluster)
    except ValueError:
        return None


def cluster_of_certificate(certificate: x509.Certificate) -> str | None:
    """The cluster an agent certificate speaks for, from its URI SAN."""
    sans = _sans(certificate)
    return cluster_of_uris(sans.get_values_for_type(x509.UniformResourceIdentifier) if sans else [])


def server_names_of(certificate: x509.Certificate) -> set[str]:
    """The DNS names and IP addresses a server certificate is valid for."""
    sans = _sans(certificate)
    if sans is None:
        return set()
    return set(sans.get_values_for_type(x509.DNSName)) | {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}


def load_certificate(path: Path) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(path.read_bytes())
    except ValueError as exc:
        raise PkiError(f"{path} is not a PEM certificate: {exc}") from None


def _load_key(path: Path) -> ec.EllipticCurvePrivateKey:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (ValueError, TypeError) as exc:
        raise PkiError(f"{path} is not an unencrypted PEM private key: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise PkiError(f"{path} is not an EC private key")
    return key


def load_pair(certificate: Path, key: Path) -> KeyPair:
    """A certificate and its key from their files; PkiError when unreadable or not a pair."""
    pair = KeyPair(load_certificate(certificate), _load_key(key))
    if pair.certificate.public_key() != pair.key.public_key():
        raise PkiError(f"{key} is not the key of {certificate}")
    return pair


def _store(pair: KeyPair, certificate: Path, key: Path) -> None:
    """The key (0600) and then the certificate; neither or both are left behind."""
    certificate.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    secret_files.create(key, pair.key_pem())
    try:
        secret_files.create(certificate, pair.certificate_pem(), mode=0o644)
    except BaseException:
        key.unlink()
        raise


class Pki:
    """The PEM files of one server's CA under `directory` (usually `<data-dir>/pki`)."""

    def __init__(self, directory: Path):
        self.directory = directory

    @classmethod
    def of_data_dir(cls, data_dir: Path) -> Pki:
        return cls(data_dir / "pki")

    @property
    def ca_certificate(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.directory / "ca.key"

    def server_files(self) -> CertificateFiles:
        return CertificateFiles(self.directory / "server.crt", self.directory / "server.key", self.ca_certificate)

    def agent_files(self, cluster: str) -> CertificateFiles:
        check_name(cluster)  # the name becomes a file name
        agents = self.directory / "agents"
        return CertificateFiles(agents / f"{cluster}.crt", agents / f"{cluster}.key", self.ca_certificate)

    def _load_pair(self, certificate: Path, key: Path) -> KeyPair | None:
        """The pair on disk, None if neither file exists; PkiError if only one does or they do not match."""
        if not certificate.exists() and not key.exists():
            return None
        for present, absent in ((certificate, key), (key, certificate)):
            if present.exists() and not absent.exists():
                raise PkiError(f"{present} exists but {absent} does not; restore it, or remove {present} to start over")
        return load_pair(certificate, key)

    def ensure_ca(self, now: datetime | None = None) -> KeyPair:
        """The CA on disk, created on first use."""
        existing = self._load_pair(self.ca_certificate, self.ca_key)
        if existing is not None:
            try:
                constraints = existing.certificate.extensions.get_extension_for_class(x509.BasicConstraints).value
            except x509.ExtensionNotFound:
                constraints = None
            if constraints is None or not constraints.ca:
                raise PkiError(f"{self.ca_certificate} is not a CA certificate")
            return existing
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        ca = create_ca(now)
        _store(ca, self.ca_certificate, self.ca_key)
        return ca

    def _ensure_leaf(
        self, files: CertificateFiles, issue: Callable[[KeyPair], KeyPair], now: datetime | None
    ) -> KeyPair:
        ca = self.ensure_ca(now)
        existing = self._load_pair(files.certificate, files.key)
        if existing is not None:
            try:
                existing.certificate.verify_directly_issued_by(ca.certificate)
            except (ValueError, TypeError, InvalidSignature):
                raise PkiError(
                    f"{files.certificate} was not issued by {self.ca_certificate}; remove it and its key to reissue"
                ) from None
            return existing
        pair = issue(ca)
        _store(pair, files.certificate, files.key)
        return pair

    def ensure_server(self, names: Iterable[str] = (), now: datetime | None = None) -> CertificateFiles:
        """The server's certificate, issued for `names` (plus localhost, 127.0.0.1) on first use.

        An existing certificate is kept as it is; `missing_server_names` tells what it does not cover.
        """
        files = self.server_files()
        wanted = list(names)
        self._ensure_leaf(files, lambda ca: issue_server_certificate(ca, wanted, now), now)
        return files

    def reissue_server(self, names: Iterable[str] = (), now: datetime | None = None) -> CertificateFiles:
        """A new server certificate for `names` (plus localhost, 127.0.0.1) in place of the one on disk; a
        running server presents it to new connections."""
        files = self.server_files()
        self._replace_leaf(files, issue_server_certificate(self.ensure_ca(now), names, now))
        return files

    def _replace_leaf(self, files: CertificateFiles, pair: KeyPair) -> None:
        files.certificate.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        secret_files.replace(files.key, pair.key_pem())
        secret_files.replace(files.certificate, pair.certificate_pem(), mode=0o644)

    def missing_server_names(self, names: Iterable[str]) -> set[str]:
        """Which of `names` the server certificate on disk does not cover."""
        covered = server_names_of(load_certificate(self.server_files().certificate))
        return {str(_general_name(n).value) for n in names} - covered

    def ensure_agent(self, cluster: str, now: datetime | None = None) -> CertificateFiles:
        """The client certificate of `cluster`'s agent, issued on first use."""
        files = self.agent_files(cluster)
        pair = self._ensure_leaf(files, lambda ca: issue_agent_certificate(ca, cluster, now), now)
        if cluster_of_certificate(pair.certificate) != cluster:
            raise PkiError(f"{files.certificate} does not name cluster {cluster!r}; remove it and its key to reissue")
        return files

    def reissue_agent(
        self, cluster: str, now: datetime | None = None
    ) -> tuple[CertificateFiles, x509.Certificate | None]:
        """A new certificate for `cluster` (a new serial) in place of the one on disk, and the one it replaced
        (None if there was none), which still works until it expires or is revoked."""
        files = self.agent_files(cluster)
        ca = self.ensure_ca(now)
        previous = load_certificate(files.certificate) if files.certificate.exists() else None
        self._replace_leaf(files, issue_agent_certificate(ca, cluster, now))
        return files, previous

    def export_agent(
        self, cluster: str, out: Path, now: datetime | None = None, *, renewed: bool = False
    ) -> CertificateFiles:
        """Issue (or reuse) `cluster`'s certificate and copy it, its key and the CA into `out`.

        A file already in `out` is left alone when it is identical and refused when it is not, unless
        `renewed`: then the certificate and key there are replaced (atomically, for an agent reading them).
        """
        source = self.ensure_agent(cluster, now)
        target = CertificateFiles(out / f"{cluster}.crt", out / f"{cluster}.key", out / "ca.crt")
        out.mkdir(mode=0o700, parents=True, exist_ok=True)
        copies = ((source.key, target.key, 0o600), (source.certificate, target.certificate, 0o644))
        for src, dst, mode in (*copies, (source.ca, target.ca, 0o644)):
            data = src.read_bytes()
            if renewed and dst != target.ca:
                secret_files.replace(dst, data, mode=mode)
                continue
            if dst.exists():
                if dst.read_bytes() != data:
                    raise PkiError(f"{dst} exists and differs from {src}; remove it or choose another --out")
                continue
            with contextlib.suppress(FileExistsError):
                secret_files.create(dst, data, mode=mode)
        return target
