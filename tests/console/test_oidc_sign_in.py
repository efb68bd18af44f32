"""Signing in to the console with the server's OpenID provider (authorization code + PKCE) in a real browser:
the provider is the harness's, which signs its one user in at once; the server discovers its endpoints at start
and accepts the id_token the page gets."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlencode

import pytest
from playwright.sync_api import expect

from meshplane_testing.browser import screenshot
from meshplane_testing.identity import SignInProvider, serve_sign_in
from meshplane_testing.meshplane import ServerProcess, run_server

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def provider() -> Iterator[SignInProvider]:
    with serve_sign_in(client_id="meshplane-console", subject="alice", roles=["viewer"]) as provider:
        yield provider


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, provider: SignInProvider) -> Iterator[ServerProcess]:
    env = {
        "MESHPLANE_OIDC_ISSUER": provider.issuer,
        "MESHPLANE_OIDC_JWKS_URI": provider.discovery["jwks_uri"],
        "MESHPLANE_OIDC_CONSOLE_CLIENT_ID": provider.client_id,
        "MESHPLANE_OIDC_CONSOLE_NAME": "Example ID",
    }
    with run_server(tmp_path_factory.mktemp("console-oidc"), env=env) as server:
        yield server


def test_signing_in_with_the_provider_ends_on_the_fleet_as_its_user(
    server: ServerProcess, provider: SignInProvider, page: Any
) -> None:
    page.goto(f"{server.url}/ui/")
    page.get_by_role("button", name="Sign in with Example ID").click()

    expect(page.get_by_role("heading", name="Fleet")).to_be_visible()
    expect(page.locator("#who")).to_have_text("user alice · viewer")
    assert page.url == f"{server.url}/ui/#/fleet"  # the code and state left the address bar
    assert provider.refused == [] and provider.pending == {}
    screenshot(page, "oidc-signed-in")


def test_a_wrong_code_verifier_is_refused_and_nobody_is_signed_in(
    server: ServerProcess, provider: SignInProvider, page: Any
) -> None:
    def another_verifier(route: Any) -> None:
        form = {key: values[0] for key, values in parse_qs(route.request.post_data).items()}
        route.continue_(post_data=urlencode({**form, "code_verifier": "x" * 64}))

    page.route(provider.discovery["token_endpoint"], another_verifier)
    page.goto(f"{server.url}/ui/")
    page.get_by_role("button", name="Sign in with Example ID").click()

    expect(page.get_by_role("alert")).to_have_text("The provider refused the sign-in (HTTP 400).")
    expect(page.locator("header#top")).to_be_hidden()
    assert provider.refused[-1:] == ["wrong code verifier"]
    assert "code=" not in page.url
    screenshot(page, "oidc-refused")
