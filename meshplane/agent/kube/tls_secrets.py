"""The kubernetes.io/tls Secrets the held TLSCertificates name (`secretRef`), read by name and read again
every `interval`, so a Secret rotated in the cluster is served without a write to the control plane. While
some wanted Secret gives no pair (not made yet, unreadable) they are read sooner, from half a second apart
backing off to two seconds however long it stays missing, so a Secret made after the Gateway naming it is
served within about two seconds (a GET per missing Secret every two seconds at most).

Only the Secrets named are read, never listed, and what they hold stays in memory. The agent's role grants
no Secret: an operator grants `get` on the ones certificates may name (a Role in their namespace, with
resourceNames); until then the Gateway's status says the Secret may not be read.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from cryptography import x509

from meshplane.agent.kube.client import KubeClient, KubeRefused, KubeUnavailable, ResourceType
from meshplane.lifecycle import Backoff, describe, wait_at_most
from meshplane.model.gateways import check_private_key, key_matches
from meshplane.observability.logging import get_logger

log = get_logger("meshplane.agent.kube.tls_secrets")

SECRETS = ResourceType("v1", "Secret", "secrets", namespaced=True)
TLS_TYPE = "kubernetes.io/tls"

SecretKey = tuple[str, str]
"""(namespace, name) of a Secret."""


@dataclass(frozen=True)
class TLSPair:
    certificate: str
    private_key: str


class InvalidTLSSecret(ValueError):
    """A Secret that holds no pair Envoy could serve; its message says why."""


def tls_pair(secret: dict) -> TLSPair:
    """The PEM certificate chain and key of a kubernetes.io/tls Secret, checked as Envoy would load them:
    InvalidTLSSecret for another type, a key missing, PEM that does not parse, or a key not the leaf's."""
    if secret.get("type") != TLS_TYPE:
        raise InvalidTLSSecret(f"is of type {secret.get('type') or 'Opaque'}")
    data = secret.get("data") or {}
    certificate, private_key = _pem(data, "tls.crt"), _pem(data, "tls.key")
    try:
        if not x509.load_pem_x509_certificates(certificate.encode()):
            raise ValueError
    except ValueError:
        raise InvalidTLSSecret("tls.crt is not a PEM certificate chain") from None
    try:
        check_private_key(private_key)
    except ValueError:
        raise InvalidTLSSecret("tls.key is not an unencrypted PEM private key") from None
    if not key_matches(certificate, private_key):
        raise InvalidTLSSecret("tls.key is not the key of the certificate in tls.crt")
    return TLSPair(certificate, private_key)


def _pem(data: dict, name: str) -> str:
    if not data.get(name):
        raise InvalidTLSSecret(f"has no {name}")
    try:
        return base64.b64decode(data[name], validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise InvalidTLSSecret(f"{name} is not base64") from None


class TLSSecretReader:
    def __init__(
        self,
        client: KubeClient,
        on_change: Callable[[], Awaitable[None]],
        interval: float = 10.0,
        retry_from: float = 0.5,
        retry_cap: float = 2.0,
    ):
        """Every `interval` s; while some wanted Secret gives no pair, from `retry_from` s apart up to `retry_cap`."""
        self.client = client
        self.on_change = on_change
        self.interval = interval
        self._missing = Backoff(initial=min(retry_from, interval), cap=min(max(retry_from, retry_cap), interval))
        self.pairs: dict[SecretKey, TLSPair] = {}
        self.problems: dict[SecretKey, str] = {}
        """Why a named Secret gives no pair (missing, invalid, unreadable)."""
        self._wanted: frozenset[SecretKey] = frozenset()
        self._asked = asyncio.Event()

    def want(self, keys: Iterable[SecretKey]) -> None:
        """The Secrets the held certificates name now; new ones are read at once."""
        keys = frozenset(keys)
        if keys - self._wanted:
            self._asked.set()
        self._wanted = keys

    async def run(self) -> None:
        retries = self._missing.retries()
        while True:
            self._asked.clear()
            if await self.read():
                await self.on_change()
            if self.problems:
                delay = retries.next_delay()
            else:
                retries.reset()
                delay = self.interval
            await wait_at_most(delay, self._asked.wait())

    async def read(self) -> bool:
        """Read every wanted Secret; whether what they hold changed."""
        pairs, problems = {}, {}
        for namespace, name in sorted(self._wanted):
            key = (namespace, name)
            try:
                secret = await self.client.get(SECRETS, namespace, name)
            except (KubeRefused, KubeUnavailable) as exc:
                log.warning("a TLS Secret could not be read", namespace=namespace, name=name, error=describe(exc))
                if key in self.pairs:  # keep serving what was read last
                    pairs[key] = self.pairs[key]
                elif isinstance(exc, KubeRefused) and exc.status_code == 403:
                    problems[key] = "the agent may not read (grant it get on this Secret)"
                else:
                    problems[key] = "could not be read"
                continue
            if secret is None:
                problems[key] = "is not there"
                continue
            try:
                pairs[key] = tls_pair(secret)
            except InvalidTLSSecret as invalid:
                problems[key] = f"is not a valid {TLS_TYPE} Secret: {invalid}"
        changed = (pairs, problems) != (self.pairs, self.problems)
        self.pairs, self.problems = pairs, problems
        return changed
