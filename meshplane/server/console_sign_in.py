"""What the console's sign-in page needs to offer signing in with the server's OpenID provider: the console's
client id and the provider's authorization and token endpoints, as configured or else read from the issuer's
discovery document (`/.well-known/openid-configuration`) once, at start."""

from __future__ import annotations

from typing import Any

import httpx

from meshplane.config import ServerSettings
from meshplane.observability.logging import get_logger

log = get_logger("meshplane.server.console_sign_in")

DISCOVERY_PATH = "/.well-known/openid-configuration"
DISCOVERY_TIMEOUT = 5.0
"""Seconds the start waits for the provider's discovery document."""


class DiscoveryFailed(ValueError):
    """The issuer's discovery document could not be read or does not describe that issuer."""


async def discover(issuer: str) -> dict[str, Any]:
    """The issuer's discovery document; it must name the same issuer (OpenID Connect Discovery 1.0, 4.3), so
    that a document served elsewhere cannot send users to another provider."""
    try:
        async with httpx.AsyncClient(timeout=DISCOVERY_TIMEOUT) as client:
            response = await client.get(issuer.rstrip("/") + DISCOVERY_PATH)
            response.raise_for_status()
            document = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise DiscoveryFailed(f"cannot read {issuer}{DISCOVERY_PATH}: {exc}") from None
    if not isinstance(document, dict) or document.get("issuer") != issuer:
        raise DiscoveryFailed(f"{issuer}{DISCOVERY_PATH} does not describe the issuer {issuer!r}")
    return document


async def console_oidc(settings: ServerSettings) -> dict[str, str] | None:
    """The console's OpenID sign-in, or None when it has none. A provider that cannot be discovered leaves the
    console with token sign-in only (logged), rather than keeping the server from starting."""
    client_id, issuer = settings.oidc_console_client_id, settings.oidc_issuer
    if client_id is None or issuer is None:
        return None
    authorization, token = settings.oidc_authorization_endpoint, settings.oidc_token_endpoint
    if authorization is None or token is None:
        try:
            document = await discover(issuer)
        except DiscoveryFailed as exc:
            log.warning("the console offers no OpenID sign-in", error=str(exc))
            return None
        authorization = authorization or document.get("authorization_endpoint")
        token = token or document.get("token_endpoint")
        if not isinstance(authorization, str) or not isinstance(token, str):
            log.warning("the console offers no OpenID sign-in: the discovery document names no endpoints")
            return None
    return {
        "issuer": issuer,
        "clientId": client_id,
        "name": settings.oidc_console_name or issuer,
        "authorizationEndpoint": authorization,
        "tokenEndpoint": token,
    }
