"""Whoever stands between the gateway and an identity provider's key set must not be able to hand the gateway
keys of their own: a remote JWKS over HTTPS is verified (the system's trust store, or the CA bundle the API
gives) for the URI's host name. Through a real Envoy: a correctly signed user token passes only when the key
set came from a server the gateway could verify."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2

from meshplane.agent.translate import GatewaySettings, translate_apis
from meshplane.model.resource import InvalidObject
from meshplane.security.ca import create_ca
from meshplane_testing.envoy import EnvoyProcess, run_envoy_config
from meshplane_testing.eventually import eventually
from meshplane_testing.identity import IdentityProvider, serve_key_set, server_certificate
from meshplane_testing.process import free_port
from meshplane_testing.static_bootstrap import static_bootstrap
from meshplane_testing.translate_factories import LOOPBACK, api, backend
from meshplane_testing.upstream import run_upstream

ISSUER = "https://idp.test"
SETTINGS = GatewaySettings(backends=LOOPBACK)


def users_api(name: str, jwks_uri: str, upstream: int = 9001, **jwt: Any) -> Any:
    auth = {"jwt": {"issuer": ISSUER, "audiences": ["orders"], "jwksUri": jwks_uri, **jwt}}
    return api(name, basePath=f"/{name}", authentication=auth, backends=[backend(port=upstream)])


def tls_context(config: Any, name: str) -> tls_pb2.UpstreamTlsContext:
    (cluster,) = [cluster for cluster in config.clusters if cluster.name == name]
    context = tls_pb2.UpstreamTlsContext()
    cluster.transport_socket.typed_config.Unpack(context)
    return context


def test_a_remote_key_set_is_verified_against_the_system_store_and_the_uri_host() -> None:
    config = translate_apis([users_api("users", "https://idp.example/keys")], SETTINGS)
    context = tls_context(config, "jwks.shop.users")
    validation = context.common_tls_context.validation_context
    assert validation.trusted_ca.filename == SETTINGS.jwks_ca_file == "/etc/ssl/certs/ca-certificates.crt"
    assert [matcher.matcher.exact for matcher in validation.match_typed_subject_alt_names] == ["idp.example"]
    assert context.sni == "idp.example"


def test_an_api_may_name_the_ca_its_key_set_server_is_verified_against() -> None:
    pem = create_ca().certificate_pem().decode()
    config = translate_apis([users_api("users", "https://idp.example/keys", jwksCaCertificates=pem)], SETTINGS)
    validation = tls_context(config, "jwks.shop.users").common_tls_context.validation_context
    assert validation.trusted_ca.inline_string == pem


@pytest.mark.parametrize(
    ("jwt", "path"),
    [
        ({"jwksUri": "https://idp.example/keys", "jwksCaCertificates": "not a certificate"}, "jwksCaCertificates"),
        ({"jwksUri": "http://idp.example/keys", "jwksCaCertificates": "PEM"}, "jwksCaCertificates"),
    ],
)
def test_a_ca_bundle_that_is_not_pem_or_not_for_https_is_refused_at_write_time(jwt: dict, path: str) -> None:
    if jwt["jwksCaCertificates"] == "PEM":
        jwt = {**jwt, "jwksCaCertificates": create_ca().certificate_pem().decode()}
    with pytest.raises(InvalidObject) as refused:
        api("users", basePath="/users", authentication={"jwt": {"issuer": ISSUER, **jwt}}, backends=[backend()])
    assert any(error.path.endswith(f"jwt.{path}") for error in refused.value.errors), refused.value.errors


@dataclass
class Gateway:
    envoy: EnvoyProcess
    client: httpx.Client

    def stat(self, name: str) -> int:
        _, body = self.envoy.admin(f"/stats?filter=^{name}$")
        return sum(int(line.rsplit(":", 1)[1]) for line in body.splitlines() if line.strip())

    def calls(self, path: str, token: str) -> int:
        return self.client.get(path, headers={"Authorization": f"Bearer {token}"}).status_code


@pytest.fixture
def idp() -> IdentityProvider:
    return IdentityProvider(ISSUER, "orders")


@pytest.fixture
def gateway(tmp_path: Path, idp: IdentityProvider) -> Iterator[Gateway]:
    """One Envoy with three APIs whose key sets come over HTTPS from loopback servers: `untrusted` from a
    server whose CA the API does not name, `trusted` from the same server with its CA named, `misnamed` from a
    server of that CA whose certificate is for another host name."""
    ca = create_ca()
    pem = ca.certificate_pem().decode()
    with ExitStack() as stack:
        upstream, _ = stack.enter_context(run_upstream("orders"))
        genuine, _ = stack.enter_context(serve_key_set(idp.jwks, server_certificate(ca, ["localhost"])))
        other, _ = stack.enter_context(serve_key_set(idp.jwks, server_certificate(ca, ["other.example"])))
        port = free_port()
        apis = [
            users_api("untrusted", f"https://localhost:{genuine}/keys", upstream),
            users_api("trusted", f"https://localhost:{genuine}/keys", upstream, jwksCaCertificates=pem),
            users_api("misnamed", f"https://localhost:{other}/keys", upstream, jwksCaCertificates=pem),
        ]
        config = translate_apis(apis, GatewaySettings(listener_port=port, backends=LOOPBACK))
        envoy = stack.enter_context(run_envoy_config(tmp_path, "gw", static_bootstrap(config, admin_port=free_port())))
        envoy.wait_live()
        envoy.wait_listener(port)
        client = stack.enter_context(httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5))
        yield Gateway(envoy, client)


@pytest.mark.envoy
def test_a_token_passes_only_with_a_key_set_from_a_verified_server(gateway: Gateway, idp: IdentityProvider) -> None:
    token = idp.token()
    eventually(
        lambda: gateway.calls("/trusted/x", token) == 200,
        timeout=15.0,
        what="the trusted key set to be fetched",
        interval=0.2,
    )
    eventually(
        lambda: gateway.stat("cluster.jwks.shop.untrusted.ssl.fail_verify_error") > 0,
        timeout=15.0,
        what="an untrusted server",
        interval=0.2,
    )
    eventually(
        lambda: gateway.stat("cluster.jwks.shop.misnamed.ssl.fail_verify_san") > 0,
        timeout=15.0,
        what="a misnamed server",
        interval=0.2,
    )
    time.sleep(0.5)
    assert gateway.calls("/untrusted/x", token) == 401
    assert gateway.calls("/misnamed/x", token) == 401
    assert gateway.calls("/trusted/x", idp.token(key=IdentityProvider(ISSUER, "orders").key)) == 401
