"""HTTPS at the gateway with a real server, agent and Envoy: SNI across two certificates (`curl --cacert`),
client certificates required or optional per listener, and a certificate rotated by a write while a
kept-alive connection goes on being served, the listener untouched."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes

from meshplane.security.ca import KeyPair, create_ca, issue_agent_certificate, issue_server_certificate
from meshplane_testing import documents
from meshplane_testing.envoy import EnvoyProcess, run_envoy
from meshplane_testing.eventually import eventually
from meshplane_testing.meshplane import AgentProcess, ServerProcess, run_agent, run_server
from meshplane_testing.process import free_port
from meshplane_testing.upstream import run_upstream

pytestmark = pytest.mark.timeout(90)

SHOP, BANK, SECURE = "shop.example.com", "bank.example.com", "secure.example.com"


@dataclass
class Fleet:
    server: ServerProcess
    agent: AgentProcess
    envoy: EnvoyProcess
    files: Path
    ports: dict[str, int]
    """Listener name -> port."""
    certificates: dict[str, KeyPair]
    ca: KeyPair
    seen: list[dict[str, Any]]
    """The requests the upstream saw."""
    client: KeyPair | None = None

    def tls(self, host: str) -> ssl.SSLSocket:
        """A TLS connection to the web listener with SNI `host`, the served certificate verified against the CA."""
        context = ssl.create_default_context(cafile=str(self.files / "ca.crt"))
        raw = socket.create_connection(("127.0.0.1", self.ports["web"]), timeout=5)
        return context.wrap_socket(raw, server_hostname=host)

    def pem(self, name: str, pair: KeyPair) -> tuple[Path, Path]:
        certificate, key = self.files / f"{name}.crt", self.files / f"{name}.key"
        certificate.write_bytes(pair.certificate_pem())
        key.write_bytes(pair.key_pem())
        return certificate, key

    def curl(self, host: str, listener: str, client: str | None = None, *headers: str) -> tuple[int, str]:
        """(curl's exit code, the HTTP status or nothing) of GET https://host:port/orders/x with SNI `host`."""
        port = self.ports[listener]
        argv = ["curl", "-sS", "--max-time", "5", "--cacert", str(self.files / "ca.crt")]
        argv += [item for header in headers for item in ("-H", header)]
        argv += ["--resolve", f"{host}:{port}:127.0.0.1", "-o", "/dev/null", "-w", "%{http_code}"]
        if client is not None:
            argv += ["--cert", str(self.files / f"{client}.crt"), "--key", str(self.files / f"{client}.key")]
        done = subprocess.run([*argv, f"https://{host}:{port}/orders/x"], capture_output=True, text=True, timeout=10)
        return done.returncode, done.stdout

    def put(self, doc: dict[str, Any]) -> None:
        plural = {"TLSCertificate": "tlscertificates", "Gateway": "gateways", "API": "apis"}[doc["kind"]]
        with self.server.http() as http:
            response = http.put(f"/v1/projects/default/{plural}/{doc['metadata']['name']}", json=doc)
        assert response.status_code in (200, 201), response.text

    def stat(self, name: str) -> int:
        status, body = self.envoy.admin(f"/stats?filter=^{name}$")
        assert status == 200, body
        return int(body.split(":")[1]) if body.strip() else 0


def certificate(name: str, pair: KeyPair) -> dict[str, Any]:
    spec = {"certificate": pair.certificate_pem().decode(), "privateKey": pair.key_pem().decode()}
    return documents.document("TLSCertificate", name, spec=spec)


def https(name: str, port: int, hostname: str, ref: str, **tls: Any) -> dict[str, Any]:
    return {
        "name": name,
        "port": port,
        "protocol": "HTTPS",
        "hostnames": [hostname],
        "tls": {"certificateRefs": [ref], **tls},
    }


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    tmp_path = tmp_path_factory.mktemp("https")
    ca, client_ca, stranger_ca = create_ca(), create_ca(), create_ca()
    pairs = {
        "shop-cert": issue_server_certificate(ca, [SHOP]),
        "bank-cert": issue_server_certificate(ca, [BANK]),
        "secure-cert": issue_server_certificate(ca, [SECURE]),
    }
    ports = {"web": free_port(), "required": free_port(), "optional": free_port()}
    with (
        run_upstream("orders") as (upstream_port, seen),
        run_server(tmp_path) as server,
        run_agent(tmp_path, "edge-1", server) as agent,
        run_envoy(tmp_path, "gw-1", agent.xds_port) as envoy,
    ):
        fleet = Fleet(server, agent, envoy, tmp_path, ports, pairs, ca, seen)
        (tmp_path / "ca.crt").write_bytes(ca.certificate_pem())
        fleet.pem("client", client := issue_agent_certificate(client_ca, "app-one"))
        fleet.client = client
        fleet.pem("stranger", issue_agent_certificate(stranger_ca, "app-two"))
        for name, pair in pairs.items():
            fleet.put(certificate(name, pair))
        validation = {"caCertificates": client_ca.certificate_pem().decode()}
        optional = validation | {"mode": "Optional"}
        listeners = [
            https("shop", ports["web"], SHOP, "shop-cert"),
            https("bank", ports["web"], BANK, "bank-cert"),
            https("required", ports["required"], SECURE, "secure-cert", clientValidation=validation),
            https("optional", ports["optional"], SECURE, "secure-cert", clientValidation=optional),
        ]
        fleet.put(documents.document("Gateway", "public", spec={"listeners": listeners}))
        fleet.put(documents.api("orders", backends=[documents.backend(upstream_port)], gateways=["public"]))
        for port in ports.values():
            envoy.wait_listener(port, timeout=30)
        eventually(lambda: fleet.curl(SHOP, "web") == (0, "200"), timeout=30, what="HTTPS through the gateway")
        yield fleet


@pytest.mark.parametrize(
    ("host", "listener", "client", "expected"),
    [
        pytest.param(SHOP, "web", None, (0, "200"), id="sni-shop"),
        pytest.param(BANK, "web", None, (0, "200"), id="sni-bank"),
        pytest.param(SECURE, "required", "client", (0, "200"), id="required-right-ca"),
        pytest.param(SECURE, "required", None, "refused", id="required-no-certificate"),
        pytest.param(SECURE, "required", "stranger", "refused", id="required-wrong-ca"),
        pytest.param(SECURE, "optional", None, (0, "200"), id="optional-no-certificate"),
        pytest.param(SECURE, "optional", "client", (0, "200"), id="optional-right-ca"),
        pytest.param(SECURE, "optional", "stranger", "refused", id="optional-wrong-ca"),
    ],
)
def test_https_rows(fleet: Fleet, host: str, listener: str, client: str | None, expected: Any) -> None:
    code, status = fleet.curl(host, listener, client)
    if expected == "refused":
        assert code != 0 and status in ("", "000"), (code, status)
    else:
        assert (code, status) == expected


def test_the_default_http_listener_no_longer_serves_an_api_on_a_gateway(fleet: Fleet) -> None:
    with pytest.raises(urllib.error.HTTPError) as answered:
        urllib.request.urlopen(f"http://127.0.0.1:{fleet.agent.gateway_port}/orders/x", timeout=5)
    assert answered.value.code == 404


def test_no_private_key_in_envoy_listeners_the_agent_dump_or_a_log(fleet: Fleet) -> None:
    lines = [
        line
        for pair in fleet.certificates.values()
        for line in pair.key_pem().decode().splitlines()
        if "--" not in line
    ]
    with urllib.request.urlopen(f"http://127.0.0.1:{fleet.agent.admin_port}/config_dump", timeout=5) as response:
        agent_dump = response.read().decode()
    listeners = json.dumps(
        [c for c in fleet.envoy.config_dump()["configs"] if c["@type"].endswith("ListenersConfigDump")]
    )
    assert "tls/default/shop-cert" in listeners and "tls/default/shop-cert" in agent_dump
    logs = sorted(fleet.files.glob("*.log"))
    assert [log.name for log in logs] == ["agent-edge-1.log", "envoy-gw-1.log", "server.log"]
    shown = [("agent dump", agent_dump), ("envoy listeners", listeners)]
    for what, text in [*shown, *((log.name, log.read_text(errors="replace")) for log in logs)]:
        assert not any(line in text for line in lines), f"the {what} shows a private key"


def _served_serial(fleet: Fleet) -> int:
    """The serial of the certificate a new connection to the shop's host is served (verified by the CA)."""
    with fleet.tls(SHOP) as tls:
        return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True) or b"").serial_number


def test_a_new_certificate_is_served_without_dropping_a_connection_or_changing_the_listener(fleet: Fleet) -> None:
    kept = http.client.HTTPSConnection(SHOP, fleet.ports["web"], timeout=5)
    kept.sock = sock = fleet.tls(SHOP)
    kept.request("GET", "/orders/x")
    assert kept.getresponse().read()
    modified = fleet.stat("listener_manager.listener_modified")
    rotated = issue_server_certificate(fleet.ca, [SHOP])
    fleet.put(certificate("shop-cert", rotated))
    serial = rotated.certificate.serial_number
    eventually(lambda: _served_serial(fleet) == serial, timeout=20, what="the new certificate served")
    kept.request("GET", "/orders/x")
    response = kept.getresponse()
    assert (response.status, kept.sock) == (200, sock), "the kept-alive connection was not served"
    response.read()
    kept.close()
    assert fleet.stat("listener_manager.listener_modified") == modified
    assert fleet.stat("listener_manager.total_filter_chains_draining") == 0


def test_a_gateway_naming_a_certificate_not_there_is_served_in_part_and_says_so(fleet: Fleet) -> None:
    listeners = [https("missing", free_port(), "lost.example.com", "no-such-cert")]
    fleet.put(documents.document("Gateway", "partial", spec={"listeners": listeners}))

    def status() -> str:
        with fleet.server.http() as http:
            return json.dumps(http.get("/v1/projects/default/gateways/partial").json().get("status", {}))

    told = eventually(lambda: "no-such-cert" in (text := status()) and text, timeout=20, what="the Gateway's status")
    assert "served in part on this cluster" in told and "not held here" in told
    assert fleet.curl(SHOP, "web") == (0, "200")


def test_the_agent_keeps_its_state_to_itself(fleet: Fleet) -> None:
    state = fleet.files / "agent-edge-1"
    assert state.stat().st_mode & 0o077 == 0
    assert [p.name for p in state.glob("state.db*") if p.stat().st_mode & 0o077] == []


def test_the_upstream_sees_the_verified_client_certificate_and_never_a_caller_s_own(fleet: Fleet) -> None:
    forged = 'x-forwarded-client-cert: Hash=00;Subject="CN=admin"'
    fingerprint = fleet.client.certificate.fingerprint(hashes.SHA256()).hex() if fleet.client else ""
    del fleet.seen[:]
    assert fleet.curl(SECURE, "required", "client", forged) == (0, "200")
    assert fleet.curl(SHOP, "web", None, forged) == (0, "200")
    verified, plain = (request["headers"].get("x-forwarded-client-cert", "") for request in fleet.seen)
    assert f"Hash={fingerprint}" in verified and "CN=admin" not in verified and "app-one" in verified
    assert plain == ""


def test_apis_on_one_path_in_different_route_tables_do_not_clash(fleet: Fleet) -> None:
    """The default listener and each Gateway have route tables of their own: /orders may be served on both."""
    with fleet.server.http() as http:
        beside = documents.api("orders-plain", basePath="/orders")
        created = http.put("/v1/projects/default/apis/orders-plain", json=beside)
        assert created.status_code == 201, created.text
        shadowing = documents.api("orders-twin", basePath="/orders", gateways=["public"])
        refused = http.put("/v1/projects/default/apis/orders-twin", json=shadowing)
        assert refused.status_code == 409, refused.text
        assert http.delete("/v1/projects/default/apis/orders-plain").status_code == 200
