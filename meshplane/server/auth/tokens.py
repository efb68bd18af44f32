"""Bearer tokens: issued once, kept as digests, checked in constant time, revocable.

A token reads `mpt_<id>_<secret>`: the id finds its record, the secret is compared by SHA-256 digest.
On its first start the server writes an admin token to `<data-dir>/admin-token` (mode 0600), unless
the store already has tokens or one is configured (`MESHPLANE_ADMIN_TOKEN`).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from meshplane.observability.logging import get_logger
from meshplane.server.auth.principal import Principal, Role
from meshplane.store.records import TokenRecord
from meshplane.store.store import Store

log = get_logger("meshplane.server.auth")

PREFIX = "mpt"
BOOTSTRAP = "bootstrap-admin"
CACHE_SECONDS = 5.0
"""How long a replica trusts a token record it read; a revocation elsewhere takes effect within this."""


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _split(token: str) -> tuple[str, str] | None:
    prefix, _, rest = token.partition("_")
    token_id, _, secret = rest.partition("_")
    if prefix != PREFIX or not token_id or not secret:
        return None
    return token_id, secret


class TokenService:
    def __init__(self, store: Store):
        self.store = store
        self._cache: dict[str, tuple[float, TokenRecord | None]] = {}

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
        self._cache.pop(token_id, None)
        return await self.store.revoke_token(token_id)

    async def verify(self, token: str) -> Principal | None:
        parts = _split(token)
        if parts is None:
            return None
        token_id, secret = parts
        record = await self._record(token_id)
        if record is None or record.revoked:
            return None
        if record.expires_at is not None and record.expires_at <= datetime.now(UTC):
            return None
        if not hmac.compare_digest(record.digest, _digest(secret)):
            return None
        return Principal(f"token {record.name}", Role(record.role), record.project)

    async def _record(self, token_id: str) -> TokenRecord | None:
        now = time.monotonic()
        cached = self._cache.get(token_id)
        if cached is not None and now - cached[0] < CACHE_SECONDS:
            return cached[1]
        record = await self.store.token(token_id)
        self._cache[token_id] = (now, record)
        return record

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
        partial = token_file.with_suffix(".partial")
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as out:
            out.write(token + "\n")
        os.replace(partial, token_file)
        log.info("admin token written", path=str(token_file))
