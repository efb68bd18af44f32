"""The client certificate as a credential (`authentication.mtls`), end to end with a real server, agent and
Envoy and real TLS (curl): a certificate counts as the Application whose `clientCertificates` name it (by
SAN, subject or fingerprint), alone or beside a signed API key (both required, or either one); subscriptions,
plans and plan limits apply to it as to a key. An API asking for certificates is never served where they
are not verified."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import hashes

from meshplane.security.ca import KeyPair, create_ca, issue_agent_certificate, issue_server_certificate
from meshplane_testing import documents
from meshplane_testing.access_fleet import data_plane, issue
from meshplane_testing.eventually import eventually
from meshplane_testing.identity import IdentityProvider
from meshplane_testing.meshplane import run_server
from meshplane_testing.north import put
from meshplane_testing.process import free_port
from meshplane_testing.upstream import run_upstream
from tests.gateway.test_https import certificate, https

pytestmark = [pytest.mark.envoy, pytest.mark.timeout(90)]

HOST = "api.example.com"
CERTIFICATE_ONLY = {"mtls": {}}
BOTH = {"apiKey": {"header": "x-api-key"}, "mtls": {"required": True}}
EITHER = {"apiKey": {"header": "x-api-key"}, "mtls": {"required": False}}
ISSUER, AUDIENCE = "https://idp.example.com", "shop"
IDP = IdentityProvider(ISSUER, AUDIENCE)
TOKEN_OR_CERTIFICATE = {
    "jwt": {"issuer": ISSUER, "audiences": [AUDIENCE], "jwks": IDP.jwks, "requireSubscription": True},
    "mtls": {"required": False},
}


@dataclass
class Fleet:
    files: Path
    ports: dict[str, int]
    keys: dict[str, str]
    """Application -> one of its signed keys."""
    seen: list[dict[str, Any]]
    north: httpx.Client

    def curl(
        self, path: str, client: str | None = None, key: str | None = None, listener: str = "mtls", *headers: str
    ) -> str:
        """The HTTP status of GET https://HOST:port/path (curl's exit code when no answer came)."""
        port = self.ports[listener]
        argv = ["curl", "-sS", "--max-time", "5", "--cacert", str(self.files / "ca.crt")]
        argv += ["--resolve", f"{HOST}:{port}:127.0.0.1", "-o", "/dev/null", "-w", "%{http_code}"]
        if client is not None:
            argv += ["--cert", str(self.files / f"{client}.crt"), "--key", str(self.files / f"{client}.key")]
        if key is not None:
            argv += ["-H", f"x-api-key: {self.keys[key]}"]
        argv += [item for header in headers for item in ("-H", header)]
        done = subprocess.run([*argv, f"https://{HOST}:{port}{path}"], capture_output=True, text=True, timeout=10)
        return done.stdout if done.stdout not in ("", "000") else f"curl exit {done.returncode}"


def _pem(files: Path, name: str, pair: KeyPair) -> None:
    (files / f"{name}.crt").write_bytes(pair.certificate_pem())
    (files / f"{name}.key").write_bytes(pair.key_pem())


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    files = tmp_path_factory.mktemp("mtls-auth")
    ca, client_ca = create_ca(), create_ca()
    clients = {name: issue_agent_certificate(client_ca, name) for name in ("alpha", "beta", "gamma", "delta", "nobody")}
    ports = {"mtls": free_port(), "plain": free_port()}
    with (
        run_upstream("mtls") as (upstream_port, seen),
        run_server(files) as server,
        data_plane(files, server, "edge", None, enforcer=False, limiter=False) as (_, envoy, _),
        server.http() as north,
    ):
        (files / "ca.crt").write_bytes(ca.certificate_pem())
        for name, pair in clients.items():
            _pem(files, name, pair)
        put(north, certificate("api-cert", issue_server_certificate(ca, [HOST])))
        optional = {"caCertificates": client_ca.certificate_pem().decode(), "mode": "Optional"}
        listeners = [
            https("mtls", ports["mtls"], HOST, "api-cert", clientValidation=optional),
            https("plain", ports["plain"], HOST, "api-cert"),
        ]
        put(north, documents.document("Gateway", "public", spec={"listeners": listeners}))
        fingerprint = clients["beta"].certificate.fingerprint(hashes.SHA256())
        (files / "beta.fingerprint").write_text(fingerprint.hex())
        by = {
            "alpha": {"san": "spiffe://meshplane/cluster/alpha"},
            "beta": {"fingerprint": fingerprint.hex(":")},
            "gamma": {"subject": "CN=gamma,O=meshplane"},
            "delta": {"san": "spiffe://meshplane/cluster/delta"},
        }
        for app, mapping in by.items():
            clients = [{"issuer": ISSUER, "clientId": f"{app}-client"}]
            put(north, documents.application(app, clientCertificates=[mapping], clientIds=clients))
        backend = [documents.backend(upstream_port)]
        for name, auth in (
            ("certs", CERTIFICATE_ONLY),
            ("both", BOTH),
            ("either", EITHER),
            ("limited", CERTIFICATE_ONLY),
            ("tokens", TOKEN_OR_CERTIFICATE),
        ):
            put(north, documents.api(name, backends=backend, authentication=auth, gateways=["public"]))
        put(north, documents.api("elsewhere", backends=backend, authentication=CERTIFICATE_ONLY))
        for app in ("alpha", "beta", "gamma"):
            put(north, documents.subscription(f"{app}-certs", application=app, api="certs", plan="gold"))
        blocked = documents.subscription("delta-certs", application="delta", api="certs", state="blocked")
        put(north, blocked)
        for app in ("alpha", "beta"):
            for api in ("both", "either", "tokens"):
                put(north, documents.subscription(f"{app}-{api}", application=app, api=api, plan="silver"))
        put(north, documents.subscription("alpha-limited", application="alpha", api="limited", plan="bronze"))
        target = {"kind": "SubscriptionPlan", "name": "bronze", "api": "limited"}
        policy = {"target": target, "requestsPerUnit": 2, "unit": "hour", "scope": "local"}
        put(north, documents.rate_limit_policy("bronze-limit", **policy))
        keys = {app: issue(north, app)["key"] for app in ("alpha", "beta", "gamma")}
        fleet = Fleet(files, ports, keys, seen, north)
        for port in ports.values():
            envoy.wait_listener(port, timeout=30)
        eventually(lambda: fleet.curl("/certs/x", "alpha") == "200", timeout=30, what="a certificate caller served")
        eventually(lambda: fleet.curl("/both/x", "alpha", "alpha") == "200", timeout=30, what="keys delivered")
        yield fleet


@pytest.mark.parametrize(
    ("path", "client", "key", "expected"),
    [
        pytest.param("/certs/x", "alpha", None, "200", id="certificate-by-san"),
        pytest.param("/certs/x", "beta", None, "200", id="certificate-by-fingerprint"),
        pytest.param("/certs/x", "gamma", None, "200", id="certificate-by-subject"),
        pytest.param("/certs/x", "nobody", None, "403", id="unmapped-certificate"),
        pytest.param("/certs/x", "delta", None, "403", id="subscription-blocked"),
        pytest.param("/certs/x", None, None, "401", id="no-certificate"),
        pytest.param("/certs/x", None, "alpha", "401", id="a-key-is-not-a-certificate"),
        pytest.param("/both/x", "alpha", "alpha", "200", id="both-given"),
        pytest.param("/both/x", "alpha", None, "401", id="both-key-missing"),
        pytest.param("/both/x", None, "alpha", "403", id="both-certificate-missing"),
        pytest.param("/both/x", "alpha", "beta", "403", id="both-of-different-applications"),
        pytest.param("/both/x", "gamma", "gamma", "403", id="both-not-subscribed"),
        pytest.param("/either/x", "alpha", None, "200", id="either-certificate-alone"),
        pytest.param("/either/x", None, "alpha", "200", id="either-key-alone"),
        pytest.param("/either/x", "beta", "alpha", "200", id="either-both-given"),
        pytest.param("/either/x", None, None, "401", id="either-neither"),
        pytest.param("/either/x", "gamma", None, "403", id="either-certificate-not-subscribed"),
        pytest.param("/either/x", None, "gamma", "403", id="either-key-not-subscribed"),
    ],
)
def test_certificate_rows(fleet: Fleet, path: str, client: str | None, key: str | None, expected: str) -> None:
    assert fleet.curl(path, client, key) == expected


@pytest.mark.parametrize(
    ("client", "token_client", "expected"),
    [
        pytest.param(None, "alpha-client", "200", id="token-alone"),
        pytest.param("beta", None, "200", id="certificate-alone"),
        pytest.param(None, "gamma-client", "403", id="token-of-an-application-not-subscribed"),
        pytest.param(None, None, "401", id="neither"),
    ],
)
def test_a_token_or_a_certificate(fleet: Fleet, client: str | None, token_client: str | None, expected: str) -> None:
    headers = [f"authorization: Bearer {IDP.token(azp=token_client)}"] if token_client is not None else []
    assert fleet.curl("/tokens/x", client, None, "mtls", *headers) == expected


@pytest.mark.parametrize(
    ("path", "client", "key", "application", "plan"),
    [
        pytest.param("/certs/x", "beta", None, "beta", "gold", id="certificate"),
        pytest.param("/both/x", "alpha", "alpha", "alpha", "silver", id="both"),
        pytest.param("/either/x", "beta", None, "beta", "silver", id="either-by-certificate"),
        pytest.param("/either/x", None, "alpha", "alpha", "silver", id="either-by-key"),
    ],
)
def test_the_upstream_sees_the_application_and_plan(
    fleet: Fleet, path: str, client: str | None, key: str | None, application: str, plan: str
) -> None:
    del fleet.seen[:]
    assert fleet.curl(path, client, key) == "200"
    headers = fleet.seen[-1]["headers"]
    assert (headers.get("x-meshplane-application"), headers.get("x-meshplane-plan")) == (application, plan)


@pytest.mark.parametrize(
    ("client", "expected"), [(None, "401"), ("nobody", "403")], ids=["no-certificate", "unmapped-certificate"]
)
def test_a_fingerprint_a_caller_writes_in_a_header_counts_for_nothing(
    fleet: Fleet, client: str | None, expected: str
) -> None:
    fingerprint = (fleet.files / "beta.fingerprint").read_text()
    forged = f'x-forwarded-client-cert: Hash={fingerprint};Subject="CN=beta,O=meshplane"'
    assert fleet.curl("/certs/x", client, None, "mtls", forged) == expected


def test_a_plan_limit_holds_for_a_certificate_caller(fleet: Fleet) -> None:
    answers = [fleet.curl("/limited/x", "alpha") for _ in range(3)]
    assert answers == ["200", "200", "429"]


def test_a_listener_that_does_not_verify_certificates_refuses_the_api_saying_why(fleet: Fleet) -> None:
    assert fleet.curl("/certs/x", listener="plain") == "503"
    assert fleet.curl("/either/x", key="alpha", listener="plain") == "503"

    def status() -> str:
        return str(fleet.north.get("/v1/projects/default/gateways/public").json().get("status", {}))

    told = eventually(lambda: "does not verify" in (text := status()) and text, timeout=20, what="the Gateway status")
    assert "listener plain" in told and "certs" in told


def test_an_api_asking_for_certificates_is_not_served_on_the_default_listener(fleet: Fleet) -> None:
    def status() -> str:
        return str(fleet.north.get("/v1/projects/default/apis/elsewhere").json().get("status", {}))

    told = eventually(lambda: "client certificates" in (text := status()) and text, timeout=20, what="the status")
    assert "mtls" in told
