"""Authentication of north-API requests, and a brake on clients that keep failing it.

Every route depends on `current_principal`: the bearer token (ours, or an OIDC JWT when configured)
decides who the caller is. The credential is checked first: a valid one always gets in. Only failures
count, and a client address with too many failures in a minute gets 429 for further ones until the
minute has passed, so tokens cannot be guessed at speed while one client (or everyone behind the same
NAT) failing never locks out a valid user.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from meshplane.server.acting import act_for
from meshplane.server.auth.oidc import OidcVerifier
from meshplane.server.auth.principal import OPEN, Principal
from meshplane.server.auth.tokens import PREFIX, TokenService
from meshplane.server.problems import Problem

WINDOW = 60.0
MAX_CLIENTS = 10_000
"""Addresses whose failures are remembered; beyond, the longest-known is forgotten, so the brake's memory
stays bounded however many addresses fail."""


@dataclass
class FailureBrake:
    limit: int = 30
    failures: dict[str, deque[float]] = field(default_factory=dict)

    def failed(self, client: str) -> None:
        """Count one failure of `client`, or refuse it (429) when it already failed `limit` times in the
        window; a refused attempt is not counted, so the client is let try again once the window has passed."""
        recent = self._recent(client)
        now = time.monotonic()
        if len(recent) >= self.limit:
            retry = int(WINDOW - (now - recent[0])) + 1
            raise Problem(429, "too many failed authentications; try again later", headers={"Retry-After": str(retry)})
        recent.append(now)
        self.failures[client] = recent
        while len(self.failures) > MAX_CLIENTS:
            del self.failures[next(iter(self.failures))]

    def _recent(self, client: str) -> deque[float]:
        recent = self.failures.get(client, deque())
        horizon = time.monotonic() - WINDOW
        while recent and recent[0] < horizon:
            recent.popleft()
        if not recent:
            self.failures.pop(client, None)
        return recent


@dataclass
class Authenticator:
    tokens: TokenService
    oidc: OidcVerifier | None = None
    brake: FailureBrake = field(default_factory=FailureBrake)

    async def authenticate(self, request: Request) -> Principal:
        scheme, _, credential = request.headers.get("authorization", "").partition(" ")
        credential = credential.strip()
        principal = None
        if scheme.lower() == "bearer" and credential:
            if credential.startswith(PREFIX + "_"):
                principal = await self.tokens.verify(credential)
            elif self.oidc is not None:
                principal = await self.oidc.verify(credential)
        if principal is not None:
            return principal
        self.brake.failed(request.client.host if request.client else "unknown")
        reason = "a bearer token is required" if not credential else "the bearer token is not valid"
        raise Problem(401, reason, headers={"WWW-Authenticate": 'Bearer realm="meshplane"'})


async def current_principal(request: Request) -> Principal:
    """Who the request speaks for, and from now on acts for (see `acting`); an app built without an
    authenticator (in-process tests) is open."""
    authenticator: Authenticator | None = getattr(request.app.state, "authenticator", None)
    principal = OPEN if authenticator is None else await authenticator.authenticate(request)
    act_for(principal)
    return principal


_BEARER = HTTPBearer(auto_error=False, description=f"A meshplane token ({PREFIX}_...) or, when configured, an OIDC JWT")


async def _caller(
    request: Request, _credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)]
) -> Principal:
    """`current_principal`, declared through FastAPI's bearer scheme so that the OpenAPI document says which
    routes need a token (the authenticator reads the header itself, and answers for a missing one)."""
    return await current_principal(request)


Caller = Annotated[Principal, Depends(_caller)]
"""A route parameter: the principal of the request, authenticated."""
