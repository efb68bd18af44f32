"""The certificates of the demo's HTTPS tour: a CA, a server certificate for the shop's host name and a
client certificate, written once into the demo's directory and kept, so a restarted demo serves the
same ones the store already holds."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from meshplane import secret_files
from meshplane.security.ca import KeyPair, create_ca, issue_agent_certificate, issue_server_certificate

SHOP_HOST = "shop.demo.localhost"
"""A name under `.localhost`, which resolves to loopback (RFC 6761) without an /etc/hosts entry."""
CLIENT_NAME = "demo-client"


@dataclass(frozen=True)
class DemoTls:
    """Where the tour's files are: the CA to trust (`curl --cacert`, the Gateway's client CA too), the
    shop's certificate and key (the TLSCertificate), the client's (`curl --cert --key`)."""

    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def shop_certificate(self) -> Path:
        return self.directory / "shop.crt"

    @property
    def shop_key(self) -> Path:
        return self.directory / "shop.key"

    @property
    def client_certificate(self) -> Path:
        return self.directory / "client.crt"

    @property
    def client_key(self) -> Path:
        return self.directory / "client.key"

    def files(self) -> tuple[Path, ...]:
        return self.ca, self.shop_certificate, self.shop_key, self.client_certificate, self.client_key


def _write(pair: KeyPair, certificate: Path, key: Path) -> None:
    secret_files.replace(key, pair.key_pem())
    secret_files.replace(certificate, pair.certificate_pem(), mode=0o644)


def ensure_demo_tls(directory: Path) -> DemoTls:
    """The tour's certificates under `directory`: those already there when complete, else a new set.
    One CA signs both leaves, so one `--cacert` file verifies the gateway and the Gateway trusts the client.
    The CA's key is not kept: nothing else is ever issued from it."""
    tls = DemoTls(directory)
    if all(path.exists() for path in tls.files()):
        return tls
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    ca = create_ca()
    _write(issue_server_certificate(ca, [SHOP_HOST]), tls.shop_certificate, tls.shop_key)
    _write(issue_agent_certificate(ca, CLIENT_NAME), tls.client_certificate, tls.client_key)
    secret_files.replace(tls.ca, ca.certificate_pem(), mode=0o644)
    return tls
