"""A user identity provider for tests: it signs user tokens, can publish its key set over HTTPS with a
certificate the test chooses (to play a genuine provider, or one impersonated on the path), and can play an
OpenID provider's sign-in (authorization code + PKCE) for one fixed user, as the console's browser tests need."""

from __future__ import annotations

import base64
import contextlib
import datetime
import hashlib
import json
import secrets
import ssl
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

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


@dataclass
class SignInProvider:
    """An OpenID provider on loopback that signs `subject` in at once, whoever asks: /authorize sends the browser
    straight back with a code, /token exchanges it (once, with the PKCE verifier of its challenge) for an
    id_token naming `roles` in its `meshplane_roles` claim, for any page origin (CORS)."""

    issuer: str
    client_id: str
    subject: str
    roles: list[str]
    signer: IdentityProvider = field(init=False)
    pending: dict[str, dict[str, str]] = field(default_factory=dict)
    """Codes handed out and not exchanged yet: what /authorize was asked with."""
    refused: list[str] = field(default_factory=list)
    """Why each refused exchange was refused."""

    def __post_init__(self) -> None:
        self.signer = IdentityProvider(self.issuer, self.client_id)

    @property
    def discovery(self) -> dict[str, str]:
        return {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "jwks_uri": f"{self.issuer}/jwks",
        }

    def authorize(self, query: dict[str, str]) -> str:
        """Where the browser goes next: back to `redirect_uri` with a code (or an error)."""
        back = query.get("redirect_uri", "")
        if query.get("client_id") != self.client_id or query.get("code_challenge_method") != "S256":
            return f"{back}?{urlencode({'error': 'invalid_request', 'state': query.get('state', '')})}"
        code = secrets.token_urlsafe(16)
        self.pending[code] = query
        return f"{back}?{urlencode({'code': code, 'state': query.get('state', '')})}"

    def exchange(self, form: dict[str, str]) -> dict[str, str] | None:
        """The tokens for a code, or None (its reason in `refused`)."""
        asked = self.pending.pop(form.get("code", ""), None)
        verifier = form.get("code_verifier", "")
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        if asked is None:
            self.refused.append("unknown or used code")
        elif form.get("client_id") != asked["client_id"] or form.get("redirect_uri") != asked.get("redirect_uri"):
            self.refused.append("another client or redirect")
        elif challenge != asked.get("code_challenge"):
            self.refused.append("wrong code verifier")
        else:
            token = self.signer.token(sub=self.subject, meshplane_roles=self.roles)
            return {"id_token": token, "access_token": token, "token_type": "Bearer", "expires_in": "300"}
        return None


@contextlib.contextmanager
def serve_sign_in(
    client_id: str = "meshplane-console", subject: str = "alice", roles: Iterable[str] = ("admin",)
) -> Iterator[SignInProvider]:
    """A `SignInProvider` over plain HTTP on loopback (its issuer is its address), stopped afterwards."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    provider = SignInProvider(f"http://127.0.0.1:{server.server_address[1]}", client_id, subject, list(roles))

    class Handler(BaseHTTPRequestHandler):
        def answer(self, status: int, body: object = None, headers: dict[str, str] | None = None) -> None:
            data = b"" if body is None else json.dumps(body).encode()
            self.send_response(status)
            for name, value in {"Access-Control-Allow-Origin": "*", **(headers or {})}.items():
                self.send_header(name, value)
            if body is not None:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            if url.path == "/.well-known/openid-configuration":
                self.answer(200, provider.discovery)
            elif url.path == "/jwks":
                self.answer(200, json.loads(provider.signer.jwks))
            elif url.path == "/authorize":
                query = {key: values[0] for key, values in parse_qs(url.query).items()}
                self.answer(302, headers={"Location": provider.authorize(query)})
            else:
                self.answer(404, {"error": "not_found"})

        def do_OPTIONS(self) -> None:
            allowed = {"Access-Control-Allow-Methods": "POST", "Access-Control-Allow-Headers": "Content-Type"}
            self.answer(204, headers=allowed)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            form = {key: values[0] for key, values in parse_qs(self.rfile.read(length).decode()).items()}
            if urlsplit(self.path).path != "/token" or form.get("grant_type") != "authorization_code":
                self.answer(400, {"error": "unsupported_grant_type"})
            elif (tokens := provider.exchange(form)) is None:
                self.answer(400, {"error": "invalid_grant"})
            else:
                self.answer(200, tokens, {"Cache-Control": "no-store"})

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: tests assert on `refused`."""

    server.RequestHandlerClass = Handler
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="sign-in", daemon=True)
    thread.start()
    try:
        yield provider
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
