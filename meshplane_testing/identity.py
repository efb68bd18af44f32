"""A user identity provider for gateway tests: it signs user tokens, and can publish its key set over HTTPS
with a certificate the test chooses (to play a genuine provider, or one impersonated on the path)."""

from __future__ import annotations

import contextlib
import datetime
import json
import ssl
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from meshplane.security.ca import KeyPair


class IdentityProvider:
    """Signs user tokens as an OpenID provider would; `jwks` is its public key set."""

    def __init__(self, issuer: str, audience: str) -> None:
        self.issuer, self.audience = issuer, audience
        self.key = ec.generate_private_key(ec.SECP256R1())
        public = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(self.key.public_key()))
        self.jwks = json.dumps({"keys": [{**public, "kid": "idp-1", "alg": "ES256"}]})

    def token(self, key: ec.EllipticCurvePrivateKey | None = None, **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": self.issuer, "aud": self.audience, "sub": "alice", "iat": now, "exp": now + 300, **claims}
        return jwt.encode(body, key or self.key, algorithm="ES256", headers={"kid": "idp-1"})


def server_certificate(ca: KeyPair, names: Iterable[str]) -> KeyPair:
    """A TLS server certificate from `ca` for exactly these DNS names, valid for an hour."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "key set server")]))
        .issuer_name(ca.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name) for name in names]), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    return KeyPair(certificate, key)


@contextlib.contextmanager
def serve_key_set(jwks: str, certificate: KeyPair) -> Iterator[tuple[int, list[str]]]:
    """(port, paths requested) of an HTTPS server on loopback answering every GET with `jwks`."""
    requested: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            requested.append(self.path)
            body = jwks.encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: tests assert on `requested`."""

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with tempfile.TemporaryDirectory() as directory:
        cert, key = Path(directory) / "tls.crt", Path(directory) / "tls.key"
        cert.write_bytes(certificate.certificate_pem())
        key.write_bytes(certificate.key_pem())
        context.load_cert_chain(cert, key)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, name="key-set", daemon=True)
    thread.start()
    try:
        yield server.server_address[1], requested
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
