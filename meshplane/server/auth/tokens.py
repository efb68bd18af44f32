"""Bearer tokens: issued once, kept as digests, checked in constant time, revocable.

A token reads `mpt_<id>_<secret>`: the id finds its record, the secret is compared by SHA-256 digest.
On its first start the server writes an admin token to `<data-dir>/admin-token` (mode 0600), unless
the store already has tokens or one is configured (`MESHPLANE_ADMIN_TOKEN`).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from datetime import UTC, datetime, timedelta
from pathlib import Path

from meshplane import secret_files
from meshplane.model.roles import Role
from meshplane.observability.logging import get_logger
from meshplane.server.auth.principal import Principal
from meshplane.store.records import TokenRecord
from meshplane.store.store import Store

log = get_logger("meshplane.server.auth")

PREFIX = "mpt"
BOOTSTRAP = "bootstrap-admin"
CACHE_SECONDS = 5.0
"""How long a replica trusts a token record it read; a revocation elsewhere takes effect within this."""
CACHE_SIZE = 4096
"""Token records a replica keeps, the least recently used going first."""


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _split(token: str) -> tuple[str, str] | None:
    prefix, _, rest = token.partition("_")
    token_id, _, secret = rest.partition("_")
    if prefix != PREFIX or not token_id or not secret:
        return None
    return token_id, secret


class TokenService:
    """Issues and checks tokens. Records are cached only once a token's secret matched them: ids a caller
    makes up are read from the store each time and never fill (or flush) the cache."""

    def __init__(self, store: Store, cache_size: int = CACHE_SIZE):
        self.store = store
        self.cache_size = cache_size
        self.cache: OrderedDict[str, tuple[float, TokenRecord]] = OrderedDict()

    async def issue(
        self, name: str, role: Role, project: str | None, expires_in: timedelta | None = None, secret: str | None = None
    ) -> tuple[TokenRecord, str]:
        token_id = secrets.token_hex(8)
        secret = secret or secrets.token_urlsafe(32)
        now = datetime.now(UTC).replace(microsecond=0)
        record = TokenRecord(
            id=token_id,
            name=name,
            role=role.value,
            project=project,
            digest=_digest(secret),
            created_at=now,
            expires_at=now + expires_in if expires_in else None,
            revoked=False,
        )
        await self.store.add_token(record)
        return record, f"{PREFIX}_{token_id}_{secret}"

    async def revoke(self, token_id: str) -> bool:
        self.cache.pop(token_id, None)
        return await self.store.revoke_token(token_id)

    async def verify(self, token: str) -> Principal | None:
        parts = _split(token)
        if parts is None:
            return None
        token_id, secret = parts
        record = self._cached(token_id) or await self.store.token(token_id)
        if record is None or not hmac.compare_digest(record.digest, _digest(secret)):
            return None
        expired = record.expires_at is not None and record.expires_at <= datetime.now(UTC)
        if record.revoked or expired:
            self.cache.pop(token_id, None)
            return None
        self._remember(record)
        return Principal(f"token {record.name}", Role(record.role), record.project, f"token/{record.name}")

    def _cached(self, token_id: str) -> TokenRecord | None:
        cached = self.cache.get(token_id)
        if cached is None:
            return None
        if time.monotonic() - cached[0] >= CACHE_SECONDS:
            del self.cache[token_id]
            return None
        self.cache.move_to_end(token_id)
        return cached[1]

    def _remember(self, record: TokenRecord) -> None:
        """Keep a record whose secret a caller just proved, unless it is already kept."""
        if record.id in self.cache:
            return
        self.cache[record.id] = (time.monotonic(), record)
        while len(self.cache) > self.cache_size:
            self.cache.popitem(last=False)

    async def bootstrap(self, token_file: Path, configured: str | None) -> None:
        """Make sure an admin can get in: the configured token, or a new one written to `token_file`."""
        if await self.store.tokens():
            return
        if configured is not None:
            parts = _split(configured)
            if parts is None:
                raise ValueError(f"the configured admin token must look like {PREFIX}_<id>_<secret>")
            await self.store.add_token(
                TokenRecord(
                    id=parts[0],
                    name=BOOTSTRAP,
                    role=Role.ADMIN.value,
                    project=None,
                    digest=_digest(parts[1]),
                    created_at=datetime.now(UTC).replace(microsecond=0),
                    expires_at=None,
                    revoked=False,
                )
            )
            return
        _, token = await self.issue(BOOTSTRAP, Role.ADMIN, None)
        token_file.parent.mkdir(parents=True, exist_ok=True)
        secret_files.replace(token_file, (token + "\n").encode())
        log.info("admin token written", path=str(token_file))
