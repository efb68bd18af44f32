"""The console's OpenID sign-in as the server offers it: endpoints discovered from the issuer (or configured),
and the id_tokens the console gets accepted by the server's bearer check."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from meshplane.config import ServerSettings
from meshplane.server.auth.oidc import OidcSettings, OidcVerifier
from meshplane.server.console_sign_in import console_oidc
from meshplane_testing.identity import IdentityProvider, serve_sign_in
from meshplane_testing.process import free_port


def settings(tmp_path: Path, **values: str) -> ServerSettings:
    return ServerSettings(data_dir=tmp_path, oidc_jwks='{"keys": []}', **values)  # type: ignore[arg-type]


async def test_the_console_offers_the_endpoints_the_issuer_publishes(tmp_path: Path) -> None:
    with serve_sign_in(client_id="console") as provider:
        offered = await console_oidc(
            settings(tmp_path, oidc_issuer=provider.issuer, oidc_console_client_id="console", oidc_console_name="Corp")
        )

    assert offered == {
        "issuer": provider.issuer,
        "clientId": "console",
        "name": "Corp",
        "authorizationEndpoint": f"{provider.issuer}/authorize",
        "tokenEndpoint": f"{provider.issuer}/token",
    }


async def test_configured_endpoints_need_no_discovery(tmp_path: Path) -> None:
    issuer = f"http://127.0.0.1:{free_port()}"  # nobody answers there
    offered = await console_oidc(
        settings(
            tmp_path,
            oidc_issuer=issuer,
            oidc_console_client_id="console",
            oidc_authorization_endpoint=f"{issuer}/auth",
            oidc_token_endpoint=f"{issuer}/token",
        )
    )

    assert offered is not None
    assert (offered["name"], offered["authorizationEndpoint"]) == (issuer, f"{issuer}/auth")


async def test_a_provider_that_cannot_be_discovered_leaves_token_sign_in_only(tmp_path: Path) -> None:
    unreachable = f"http://127.0.0.1:{free_port()}"
    with serve_sign_in(client_id="console") as provider:
        elsewhere = await console_oidc(
            settings(tmp_path, oidc_issuer=f"{provider.issuer}/", oidc_console_client_id="console")
        )
    gone = await console_oidc(settings(tmp_path, oidc_issuer=unreachable, oidc_console_client_id="console"))

    assert elsewhere is None  # its document names another issuer (without the slash)
    assert gone is None
    assert await console_oidc(settings(tmp_path, oidc_issuer=unreachable, oidc_audience="meshplane")) is None


def test_a_console_client_id_needs_an_issuer_and_stands_for_an_audience(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="oidc_console_client_id needs oidc_issuer"):
        ServerSettings(data_dir=tmp_path, oidc_console_client_id="console")

    assert settings(tmp_path, oidc_issuer="https://idp.test", oidc_console_client_id="console").oidc_audience is None


async def test_the_server_accepts_id_tokens_for_the_console_and_still_none_for_other_clients() -> None:
    signer = IdentityProvider("https://idp.test", "meshplane")
    verifier = OidcVerifier(
        OidcSettings(issuer=signer.issuer, audience="meshplane", jwks=signer.jwks, console_client_id="console")
    )
    only_console = OidcVerifier(
        OidcSettings(issuer=signer.issuer, audience="", jwks=signer.jwks, console_client_id="console")
    )

    for_console = signer.token(aud="console", meshplane_roles="viewer")
    assert (await verifier.verify(for_console)) is not None
    assert (await verifier.verify(signer.token(meshplane_roles="viewer"))) is not None
    assert (await verifier.verify(signer.token(aud="other", meshplane_roles="viewer"))) is None
    assert (await only_console.verify(for_console)) is not None
    assert (await only_console.verify(signer.token(meshplane_roles="viewer"))) is None
