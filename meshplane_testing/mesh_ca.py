"""One trust root for a fleet of test clusters, and per cluster the intermediate CA its istiod signs with.

istiod takes a plugged-in CA from a directory in the layout of its `cacerts` Secret: `ca-cert.pem` and
`ca-key.pem` (what it signs with), `root-cert.pem` (what every workload trusts) and `cert-chain.pem`
(the intermediate up to the root, sent with each workload certificate). Clusters whose intermediates
share a root trust each other's workloads, as a multi-cluster mesh needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from meshplane.security.ca import authority_certificate

_VALIDITY = timedelta(days=2)
_CLOCK_SKEW = timedelta(minutes=5)


@dataclass(frozen=True)
class Authority:
    certificate: x509.Certificate
    key: rsa.RSAPrivateKey

    def certificate_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )


def _authority(common_name: str, issuer: Authority | None, path_length: int) -> Authority:
    # RSA: the key type istiod's own self-signed CA uses, so signing takes the path Istio tests most.
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "meshplane tests"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )
    start = datetime.now(UTC) - _CLOCK_SKEW
    # digitalSignature as istiod's own CA certificates carry it.
    certificate = authority_certificate(
        subject,
        key.public_key(),
        issuer.certificate.subject if issuer else subject,
        issuer.key if issuer else key,
        start,
        start + _VALIDITY,
        path_length=path_length,
        digital_signature=True,
    )
    return Authority(certificate, key)


class MeshRoot:
    """The root every test cluster's workloads trust; it signs one intermediate per cluster and nothing else."""

    def __init__(self) -> None:
        self.root = _authority("mesh root", None, path_length=1)

    def root_pem(self) -> bytes:
        return self.root.certificate_pem()

    def write_cacerts(self, cluster: str, directory: Path) -> Path:
        """A fresh intermediate for `cluster`, written in the `cacerts` layout under `directory`."""
        intermediate = _authority(f"istiod {cluster}", self.root, path_length=0)
        directory.mkdir(parents=True, exist_ok=True)
        files = {
            "ca-cert.pem": intermediate.certificate_pem(),
            "ca-key.pem": intermediate.key_pem(),
            "root-cert.pem": self.root_pem(),
            "cert-chain.pem": intermediate.certificate_pem() + self.root_pem(),
        }
        for name, data in files.items():
            (directory / name).write_bytes(data)
        (directory / "ca-key.pem").chmod(0o600)
        return directory
