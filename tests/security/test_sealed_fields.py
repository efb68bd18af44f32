"""A TLSCertificate's private key is write-only: a real server stores it encrypted, no read shows it, and only
the clusters whose placed Gateways name the certificate receive it (over their mTLS agent channel)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.protobuf import json_format

from meshplane.model.registry import REGISTRY
from meshplane.proto.v1 import resources_pb2
from meshplane.security.ca import KeyPair, create_ca, issue_server_certificate
from meshplane_testing import documents
from meshplane_testing.meshplane import ServerProcess, run_replica, run_server
from meshplane_testing.sync_probe import API_TYPE, SyncProbe

pytestmark = pytest.mark.timeout(120)

CERT_TYPE = REGISTRY.get("TLSCertificate").type_url
GATEWAY_TYPE = REGISTRY.get("Gateway").type_url
USING, OTHER = "edge-using", "edge-other"


def certificate(name: str, pair: KeyPair) -> dict[str, Any]:
    spec = {"certificate": pair.certificate_pem().decode(), "privateKey": pair.key_pem().decode()}
    return documents.document("TLSCertificate", name, spec=spec)


def gateway(name: str, cluster: str, refs: list[str]) -> dict[str, Any]:
    """A Gateway on `cluster`: HTTPS with the certificates `refs`, or plain HTTP without any."""
    tls = {"protocol": "HTTPS", "tls": {"certificateRefs": refs}} if refs else {}
    listener = {"name": "web", "port": 10443, **tls}
    return documents.document("Gateway", name, spec={"listeners": [listener], "placement": {"clusters": [cluster]}})


def key_lines(pair: KeyPair) -> list[str]:
    """The base64 lines of the private key's PEM: any one of them found somewhere is a leak."""
    return [line for line in pair.key_pem().decode().splitlines() if line and not line.startswith("-----")]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, KeyPair, dict[str, SyncProbe]]]:
    ca = create_ca()
    pair = issue_server_certificate(ca, ["shop.example.com"])
    with run_server(tmp_path_factory.mktemp("sealed")) as server:
        probes = {c: SyncProbe(server.grpc_address, c, credentials=server.agent_credentials(c)) for c in (USING, OTHER)}
        for probe in probes.values():
            asyncio.run(probe.register())
        with server.http() as http:
            for doc in (
                certificate("shop-cert", pair),
                gateway("public", USING, ["shop-cert"]),
                gateway("plain", OTHER, []),
                documents.api("orders", placement={"clusters": [USING, OTHER]}, gateways=["public"]),
            ):
                kind = REGISTRY.get(doc["kind"]).plural
                response = http.put(f"/v1/projects/default/{kind}/{doc['metadata']['name']}", json=doc)
                assert response.status_code in (200, 201), response.text
        yield server, pair, probes


def received(probe: SyncProbe, type_url: str) -> list[Any]:
    return [r for update in probe.updates if update.type_url == type_url for r in update.upserts]


def test_only_a_cluster_whose_gateway_names_the_certificate_receives_its_key(
    fleet: tuple[ServerProcess, KeyPair, dict[str, SyncProbe]],
) -> None:
    _, pair, probes = fleet
    for probe in probes.values():
        asyncio.run(probe.sync_until(lambda p: "default/orders" in p.names(API_TYPE) and p.names(GATEWAY_TYPE)))
    [delivered] = received(probes[USING], CERT_TYPE)
    message = resources_pb2.TLSCertificate()
    delivered.resource.Unpack(message)
    assert json_format.MessageToDict(message.spec)["privateKey"] == pair.key_pem().decode()
    assert received(probes[OTHER], CERT_TYPE) == []
    assert not any(line in str(update) for update in probes[OTHER].updates for line in key_lines(pair))


def _reads(http: httpx.Client) -> dict[str, str]:
    return {
        "get": http.get("/v1/projects/default/tlscertificates/shop-cert").text,
        "list": http.get("/v1/projects/default/tlscertificates").text,
        "list all": http.get("/v1/tlscertificates").text,
        "cluster resources": http.get(f"/v1/clusters/{USING}/resources").text,
        "cluster resources yaml": http.get(f"/v1/clusters/{USING}/resources", params={"output": "yaml"}).text,
    }


def test_no_read_returns_the_private_key(fleet: tuple[ServerProcess, KeyPair, dict[str, SyncProbe]]) -> None:
    server, pair, _ = fleet
    with server.http() as http:
        reads = _reads(http)
        shown = http.get("/v1/projects/default/tlscertificates/shop-cert").json()["spec"]["privateKey"]
        with http.stream("GET", "/v1/watch", params={"since": 0}, timeout=10) as stream:
            events = []
            for line in stream.iter_lines():
                if line.startswith("data:"):
                    events.append(line)
                    if "shop-cert" in line:
                        break
        reads["watch"] = "\n".join(events)
    assert shown["set"] is True and shown["digest"].startswith("hmac-sha256:")
    assert "TLSCertificate" in reads["watch"] and "TLSCertificate" in reads["cluster resources"]
    for what, text in reads.items():
        assert not any(line in text for line in key_lines(pair)), f"{what} shows the private key"


def test_the_store_and_the_log_hold_no_private_key(
    fleet: tuple[ServerProcess, KeyPair, dict[str, SyncProbe]],
) -> None:
    server, pair, _ = fleet
    files = [p for p in server.data_dir.rglob("*") if p.is_file()] + [server.data_dir.parent / "server.log"]
    assert any(p.name.startswith("meshplane.db") for p in files)
    for path in files:
        data = path.read_bytes()
        assert not any(line.encode() in data for line in key_lines(pair)), f"{path.name} holds the private key"


def test_a_read_given_back_keeps_the_stored_key(fleet: tuple[ServerProcess, KeyPair, dict[str, SyncProbe]]) -> None:
    server, pair, probes = fleet
    with server.http() as http:
        shown = http.get("/v1/projects/default/tlscertificates/shop-cert").json()
        labelled = http.patch(
            "/v1/projects/default/tlscertificates/shop-cert",
            json={"metadata": {"labels": {"team": "shop"}}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert labelled.status_code == 200, labelled.text
        assert labelled.json()["spec"]["privateKey"] == shown["spec"]["privateKey"]
        forged = dict(shown, spec=dict(shown["spec"], privateKey={"set": True, "digest": "hmac-sha256:00"}))
        forged["metadata"] = {"name": "shop-cert", "project": "default"}
        refused = http.put("/v1/projects/default/tlscertificates/shop-cert", json=forged)
    assert refused.status_code == 422, refused.text
    assert [e["path"] for e in refused.json()["errors"]] == ["spec.privateKey"]
    probe = probes[USING]
    asyncio.run(probe.sync_until(lambda p: len(received(p, CERT_TYPE)) >= 2))
    message = resources_pb2.TLSCertificate()
    received(probe, CERT_TYPE)[-1].resource.Unpack(message)
    assert json_format.MessageToDict(message.spec)["privateKey"] == pair.key_pem().decode()


def test_the_data_key_file_is_private(fleet: tuple[ServerProcess, KeyPair, dict[str, SyncProbe]]) -> None:
    server, _, _ = fleet
    [key] = list((server.data_dir / "sealing").iterdir())
    assert key.stat().st_mode & 0o077 == 0


@pytest.mark.postgres
def test_a_replica_with_the_fleet_s_data_key_delivers_what_another_sealed(tmp_path: Path, shared_database: str) -> None:
    """Replicas share one data key (as they share one Secret): a key written through one reaches a cluster
    synced by the other."""
    pair = issue_server_certificate(create_ca(), ["shop.example.com"])
    with run_server(tmp_path, shared_database, name="a") as a, run_replica(tmp_path, a, shared_database, "b") as b:
        with a.http() as http:
            for doc in (certificate("shop-cert", pair), gateway("public", USING, ["shop-cert"])):
                kind = REGISTRY.get(doc["kind"]).plural
                response = http.put(f"/v1/projects/default/{kind}/{doc['metadata']['name']}", json=doc)
                assert response.status_code in (200, 201), response.text
        probe = SyncProbe(b.grpc_address, USING, credentials=b.agent_credentials(USING))
        asyncio.run(probe.register())
        asyncio.run(probe.sync_until(lambda p: bool(p.names(CERT_TYPE)), seconds=15))
    [delivered] = received(probe, CERT_TYPE)
    message = resources_pb2.TLSCertificate()
    delivered.resource.Unpack(message)
    assert json_format.MessageToDict(message.spec)["privateKey"] == pair.key_pem().decode()
