"""The kubernetes.io/tls Secrets the held TLSCertificates name (`secretRef`), read by name and read again
every `interval`, so a Secret rotated in the cluster is served without a write to the control plane.

Only the Secrets named are read, never listed, and what they hold stays in memory. The agent's role grants
no Secret: an operator grants `get` on the ones certificates may name (a Role in their namespace, with
resourceNames); until then the Gateway's status says the Secret may not be read.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from meshplane.agent.kube.client import KubeClient, KubeRefused, KubeUnavailable, ResourceType
from meshplane.lifecycle import describe
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


def tls_pair(secret: dict) -> TLSPair | None:
    """The PEM certificate chain and key of a kubernetes.io/tls Secret; None for another type or one incomplete."""
    data = secret.get("data") or {}
    if secret.get("type") != TLS_TYPE or not data.get("tls.crt") or not data.get("tls.key"):
        return None
    return TLSPair(base64.b64decode(data["tls.crt"]).decode(), base64.b64decode(data["tls.key"]).decode())


class TLSSecretReader:
    def __init__(self, client: KubeClient, on_change: Callable[[], Awaitable[None]], interval: float = 10.0):
        self.client = client
        self.on_change = on_change
        self.interval = interval
        self.pairs: dict[SecretKey, TLSPair] = {}
        self.problems: dict[SecretKey, str] = {}
        """Why a named Secret gives no pair (missing, of another type, unreadable)."""
        self._wanted: frozenset[SecretKey] = frozenset()
        self._asked = asyncio.Event()

    def want(self, keys: Iterable[SecretKey]) -> None:
        """The Secrets the held certificates name now; new ones are read at once."""
        keys = frozenset(keys)
        if keys - self._wanted:
            self._asked.set()
        self._wanted = keys

    async def run(self) -> None:
        while True:
            self._asked.clear()
            if await self.read():
                await self.on_change()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._asked.wait(), self.interval)

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
            pair = tls_pair(secret) if secret is not None else None
            if pair is not None:
                pairs[key] = pair
            else:
                problems[key] = "is not there" if secret is None else f"is not a complete {TLS_TYPE} Secret"
        changed = (pairs, problems) != (self.pairs, self.problems)
        self.pairs, self.problems = pairs, problems
        return changed
