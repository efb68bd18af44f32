"""A TLSCertificate that names a kubernetes.io/tls Secret (`secretRef`): the agent reads it from its cluster's
real API server and serves it over SDS; a Secret changed in the cluster is served without a write upstream,
and one that is missing makes the Gateway say so."""

from __future__ import annotations

import base64
import json
import socket
import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from meshplane.security.ca import KeyPair, create_ca, issue_server_certificate
from meshplane_testing import documents
from meshplane_testing.envoy import run_envoy
from meshplane_testing.eventually import eventually
from meshplane_testing.kube import KubeAPIServer
from meshplane_testing.meshplane import ServerProcess, run_agent, run_server
from meshplane_testing.process import free_port
from meshplane_testing.upstream import run_upstream

pytestmark = pytest.mark.timeout(90)

HOST, NAMESPACE = "shop.example.com", "edge-tls"


def secret(name: str, pair: KeyPair) -> dict[str, Any]:
    data = {"tls.crt": pair.certificate_pem(), "tls.key": pair.key_pem()}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "type": "kubernetes.io/tls",
        "data": {key: base64.b64encode(value).decode() for key, value in data.items()},
    }


def put(server: ServerProcess, doc: dict[str, Any]) -> None:
    plural = {"TLSCertificate": "tlscertificates", "Gateway": "gateways", "API": "apis"}[doc["kind"]]
    with server.http() as http:
        response = http.put(f"/v1/projects/default/{plural}/{doc['metadata']['name']}", json=doc)
    assert response.status_code in (200, 201), response.text


def served_serial(port: int, ca: Path) -> int | None:
    context = ssl.create_default_context(cafile=str(ca))
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            context.wrap_socket(raw, server_hostname=HOST) as tls,
        ):
            return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True) or b"").serial_number
    except (OSError, ssl.SSLError):
        return None


def test_a_certificate_from_a_cluster_secret_is_served_and_follows_the_secret(
    tmp_path: Path, kube_apiserver: KubeAPIServer
) -> None:
    ca = create_ca()
    first, second = issue_server_certificate(ca, [HOST]), issue_server_certificate(ca, [HOST])
    (tmp_path / "ca.crt").write_bytes(ca.certificate_pem())
    kube_apiserver.create_namespace(NAMESPACE)
    with kube_apiserver.client() as kube:
        created = kube.post(f"/api/v1/namespaces/{NAMESPACE}/secrets", json=secret("shop-tls", first))
        assert created.status_code == 201, created.text
    port = free_port()
    with (
        run_upstream("orders") as (upstream_port, _),
        run_server(tmp_path) as server,
        run_agent(tmp_path, "edge-1", server, kubeconfig=kube_apiserver.kubeconfig) as agent,
        run_envoy(tmp_path, "gw-1", agent.xds_port) as envoy,
    ):
        for name, secret_name in (("shop-cert", "shop-tls"), ("lost-cert", "no-such-secret")):
            ref = {"name": secret_name, "namespace": NAMESPACE}
            put(server, documents.document("TLSCertificate", name, spec={"secretRef": ref}))
        listeners = [
            {
                "name": "shop",
                "port": port,
                "protocol": "HTTPS",
                "hostnames": [HOST],
                "tls": {"certificateRefs": ["shop-cert"]},
            },
            {"name": "lost", "port": free_port(), "protocol": "HTTPS", "tls": {"certificateRefs": ["lost-cert"]}},
        ]
        put(server, documents.document("Gateway", "public", spec={"listeners": listeners}))
        put(server, documents.api("orders", backends=[documents.backend(upstream_port)], gateways=["public"]))
        envoy.wait_listener(port, timeout=30)
        curl = [
            "curl", "-sS", "--max-time", "5", "--cacert", str(tmp_path / "ca.crt"), "--resolve",
            f"{HOST}:{port}:127.0.0.1", "-o", "/dev/null", "-w", "%{http_code}", f"https://{HOST}:{port}/orders/x",
        ]  # fmt: skip
        answered = eventually(
            lambda: (done := subprocess.run(curl, capture_output=True, text=True, timeout=10)).stdout == "200" and done,
            timeout=20,
            what="HTTPS with the Secret's certificate",
        )
        assert answered.returncode == 0
        assert served_serial(port, tmp_path / "ca.crt") == first.certificate.serial_number

        with kube_apiserver.client() as kube:
            replaced = kube.put(f"/api/v1/namespaces/{NAMESPACE}/secrets/shop-tls", json=secret("shop-tls", second))
            assert replaced.status_code == 200, replaced.text
        serial = second.certificate.serial_number
        eventually(lambda: served_serial(port, tmp_path / "ca.crt") == serial, timeout=30, what="the Secret's new one")

        def status() -> str:
            with server.http() as http:
                return json.dumps(http.get("/v1/projects/default/gateways/public").json().get("status", {}))

        told = eventually(lambda: "no-such-secret" in (text := status()) and text, timeout=20, what="the status")
        assert f"names Secret {NAMESPACE}/no-such-secret, which is not there" in told
