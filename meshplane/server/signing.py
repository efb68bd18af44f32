"""The keys API keys are signed with, and the public key set every gateway checks them against.

Private keys stay in the server's data directory (`signing/<kid>.pem`, mode 0600), like its CA; only
their public halves leave it, as the cluster-scoped KeySet `api-keys` that the projection delivers to
every cluster. Rotating adds a key and makes it the one that signs; older public keys stay in the set,
so keys issued under them keep working until they are retired.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from meshplane import secret_files
from meshplane.observability.logging import get_logger
from meshplane.store.errors import AlreadyExists, Conflict, NotFound
from meshplane.store.store import Store

log = get_logger("meshplane.server.signing")

ISSUER = "meshplane"
KEY_SET = "api-keys"
ALGORITHM = "ES256"


@dataclass(frozen=True)
class SigningKey:
    kid: str
    private: ec.EllipticCurvePrivateKey

    def jwk(self) -> dict[str, Any]:
        public = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(self.private.public_key()))
        return {**public, "kid": self.kid, "alg": ALGORITHM, "use": "sig"}

    def sign(self, claims: dict[str, Any]) -> str:
        return jwt.encode(claims, self.private, algorithm=ALGORITHM, headers={"kid": self.kid})


def _kid(private: ec.EllipticCurvePrivateKey) -> str:
    """Hex of the public key's digest: safe as a file name and as a command-line argument (base64url may start
    with `-`, which a shell command then takes for an option)."""
    der = private.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()[:24]


class SigningKeys:
    """The signing keys of this server's data directory; the newest one signs."""

    def __init__(self, directory: Path):
        self.directory = directory

    def _paths(self) -> list[Path]:
        return sorted(self.directory.glob("*.pem"), key=lambda path: (path.stat().st_mtime_ns, path.name))

    def _load(self, path: Path) -> SigningKey:
        private = serialization.load_pem_private_key(path.read_bytes(), password=None)
        if not isinstance(private, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{path} is not an EC private key")
        return SigningKey(path.stem, private)

    def all(self) -> list[SigningKey]:
        return [self._load(path) for path in self._paths()]

    def current(self) -> SigningKey:
        paths = self._paths()
        return self._load(paths[-1]) if paths else self.rotate()

    def rotate(self) -> SigningKey:
        """A new key that signs from now on."""
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        newest = max((path.stat().st_mtime_ns for path in self._paths()), default=0)
        private = ec.generate_private_key(ec.SECP256R1())
        key = SigningKey(_kid(private), private)
        pem = private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        path = self.directory / f"{key.kid}.pem"
        secret_files.create(path, pem)
        # The newest file signs, and file times can tie (coarse clocks) or lie ahead (a clock stepped back).
        stamp = max(time.time_ns(), newest + 1)
        os.utime(path, ns=(stamp, stamp))
        log.info("signing key created", kid=key.kid)
        return key

    def retire(self, kid: str) -> None:
        """Stop trusting a key: what it signed stops working once the key set reaches the gateways."""
        paths = {path.stem: path for path in self._paths()}
        if kid not in paths:  # by lookup, never by joining a path: a kid is the caller's text
            raise KeyError(kid)
        if len(paths) == 1:
            raise ValueError("the only signing key cannot be retired; rotate first")
        (self.directory / f"{kid}.retired").touch()
        paths[kid].unlink()

    def retired(self) -> set[str]:
        """Key ids retired here, so that publishing takes them out of the shared set."""
        return {path.stem for path in self.directory.glob("*.retired")}


async def publish_key_set(store: Store, keys: SigningKeys) -> None:
    """Make the stored KeySet hold this server's public keys beside other replicas' (and drop the ones it
    retired). Retried on a concurrent write, so replicas starting together all end up in it."""
    mine = {key.kid: key.jwk() for key in keys.all()} or {keys.current().kid: keys.current().jwk()}
    retired = keys.retired()
    for _ in range(20):
        try:
            stored = await store.get("KeySet", "", KEY_SET)
            revision: int | None = stored.revision
            published = {jwk["kid"]: jwk for jwk in stored.spec.get("keys", [])}
        except NotFound:
            revision, published = None, {}
        merged = {kid: jwk for kid, jwk in published.items() if kid not in retired} | mine
        if revision is not None and merged == published:
            return
        spec = {"issuer": ISSUER, "keys": [merged[kid] for kid in sorted(merged)]}
        try:
            if revision is None:
                await store.create("KeySet", "", KEY_SET, spec=spec)
            else:
                await store.put("KeySet", "", KEY_SET, spec=spec, expected_revision=revision)
        except (AlreadyExists, Conflict, NotFound):
            await asyncio.sleep(0.05)
    raise RuntimeError("could not publish the API key set: too many concurrent writers")
