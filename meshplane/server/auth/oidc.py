"""Users' JWTs from an OpenID provider: signature against its JWKS, issuer, audience, and one claim
naming meshplane roles as `role` (every project) or `role:project`."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import httpx
import jwt

from meshplane.model.roles import Role
from meshplane.observability.logging import get_logger
from meshplane.server.auth.principal import Principal

log = get_logger("meshplane.server.auth.oidc")

JWKS_TTL = 300.0
"""Seconds a fetched key set is used before it is fetched again (sooner when a token names a new kid)."""


@dataclass(frozen=True)
class OidcSettings:
    issuer: str
    audience: str
    """What `aud` must name: without it, a token the issuer signed for any other application would pass."""
    jwks_uri: str | None = None
    jwks: str | None = None
    roles_claim: str = "meshplane_roles"
    console_client_id: str | None = None
    """The web console's client id: the id_tokens its sign-in gets name it as their `aud`, and pass too."""

    @property
    def audiences(self) -> list[str]:
        return [audience for audience in (self.audience, self.console_client_id) if audience]


def principal_of(claims: dict[str, Any], roles_claim: str) -> Principal | None:
    """The strongest grant a token's roles claim names (admin over publisher... ; fleet-wide over a project)."""
    raw = claims.get(roles_claim)
    values = raw.split() if isinstance(raw, str) else raw if isinstance(raw, list) else []
    grants = []
    for value in values:
        role, _, project = str(value).partition(":")
        if role in Role.__members__.values():
            grants.append((Role(role), project or None))
    if not grants:
        return None
    order = list(Role)
    role, project = min(grants, key=lambda grant: (order.index(grant[0]), grant[1] is not None))
    subject = claims.get("sub", "?")
    return Principal(f"user {subject}", role, project, f"oidc/{subject}")


class OidcVerifier:
    def __init__(self, settings: OidcSettings):
        if not settings.audiences:
            raise ValueError("OIDC needs an audience (oidc_audience): the client id tokens for meshplane name")
        self.settings = settings
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched = 0.0
        self._lock = asyncio.Lock()
        if settings.jwks is not None:
            self._keys = _key_set(json.loads(settings.jwks))
            self._fetched = float("inf")

    async def verify(self, token: str) -> Principal | None:
        try:
            kid = jwt.get_unverified_header(token).get("kid")
            key = await self._key(kid)
            if key is None:
                return None
            claims = jwt.decode(
                token,
                key.key,
                algorithms=[key.algorithm_name],
                issuer=self.settings.issuer,
                audience=self.settings.audiences,
                options={"require": ["exp", "iss", "aud"]},
            )
        except (jwt.PyJWTError, ValueError):
            return None
        return principal_of(claims, self.settings.roles_claim)

    async def _key(self, kid: str | None) -> jwt.PyJWK | None:
        stale = time.monotonic() - self._fetched > JWKS_TTL
        if self.settings.jwks_uri is not None and (stale or kid not in self._keys):
            async with self._lock:
                if time.monotonic() - self._fetched > 1.0:  # one fetch at a time, at most once a second
                    await self._fetch()
        if kid is None and len(self._keys) == 1:
            return next(iter(self._keys.values()))
        return self._keys.get(kid or "")

    async def _fetch(self) -> None:
        assert self.settings.jwks_uri is not None
        try:
            async with httpx.AsyncClient(timeout=5) as client:
                response = await client.get(self.settings.jwks_uri)
                response.raise_for_status()
                self._keys = _key_set(response.json())
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("cannot fetch the OIDC key set; keeping the last one", error=str(exc))
        self._fetched = time.monotonic()


def _key_set(document: dict[str, Any]) -> dict[str, jwt.PyJWK]:
    keys = {}
    for entry in document.get("keys", []):
        try:
            keys[entry.get("kid", "")] = jwt.PyJWK(entry)
        except jwt.PyJWTError:
            continue
    return keys
