"""A host outside the mesh stands on the fabric at its own address (a TLS server of the test behind it): a
pod's sidecar reaches it when a ServiceEntry declares it, and, under REGISTRY_ONLY, refuses a host none does."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from meshplane.security.ca import KeyPair, create_ca, issue_server_certificate
from meshplane_testing.eventually import eventually
from meshplane_testing.istio import Fleet, IstioCluster, Pod, ServicePort, Workload
from meshplane_testing.upstream import run_upstream

pytestmark = pytest.mark.timeout(300)

NAMESPACE = "external-hosts"
DECLARED = "api.partner.example"
UNDECLARED = "api.stranger.example"


@pytest.fixture(scope="module")
def cluster(fleet: Fleet) -> IstioCluster:
    return fleet["cluster-c"]


def _tls_server(ca: KeyPair, host: str, directory: Path) -> ssl.SSLContext:
    pair = issue_server_certificate(ca, [host])
    (directory / f"{host}.crt").write_bytes(pair.certificate_pem())
    (directory / f"{host}.key").write_bytes(pair.key_pem())
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(directory / f"{host}.crt", directory / f"{host}.key")
    return context


@pytest.fixture(scope="module")
def setting(cluster: IstioCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """A client pod with a sidecar, and two external TLS hosts on the fabric; only DECLARED has a ServiceEntry."""
    ca = create_ca()
    directory = Path(tmp_path_factory.mktemp("external-tls"))
    addresses = {DECLARED: cluster.new_address(), UNDECLARED: cluster.new_address()}
    client = Workload(
        "client", NAMESPACE, cluster.new_address(), {"app": "client"}, (ServicePort("http", 80, 8080),), sidecar=True
    )
    with (
        run_upstream("partner", tls=_tls_server(ca, DECLARED, directory)) as (partner_port, _),
        run_upstream("stranger", tls=_tls_server(ca, UNDECLARED, directory)) as (stranger_port, _),
        cluster.fabric.host(addresses[DECLARED], {443: partner_port}),
        cluster.fabric.host(addresses[UNDECLARED], {443: stranger_port}),
        cluster.serve(client) as pod,
    ):
        cluster.apply(
            {
                "apiVersion": "networking.istio.io/v1",
                "kind": "ServiceEntry",
                "metadata": {"name": "partner", "namespace": NAMESPACE},
                "spec": {
                    "hosts": [DECLARED],
                    "location": "MESH_EXTERNAL",
                    "resolution": "STATIC",
                    "ports": [{"number": 443, "name": "tls", "protocol": "TLS"}],
                    "endpoints": [{"address": addresses[DECLARED]}],
                },
            }
        )
        trust = ssl.create_default_context(cadata=ca.certificate_pem().decode())
        yield {"pod": pod, "addresses": addresses, "trust": trust}


def _status(setting: dict, host: str) -> int | None:
    """GET https://<host>/ from the client pod, connecting to the host's address as if DNS had answered it."""
    pod: Pod = setting["pod"]
    try:
        return pod.request(setting["addresses"][host], 443, "/", {"Host": host}, setting["trust"], host).status
    except OSError:
        return None


def test_a_pod_reaches_an_external_host_a_service_entry_declares(setting: dict) -> None:
    eventually(lambda: _status(setting, DECLARED) == 200, timeout=60, what=f"{DECLARED} through the sidecar")


def test_under_registry_only_a_pod_cannot_reach_a_host_no_service_entry_declares(
    cluster: IstioCluster, setting: dict
) -> None:
    eventually(lambda: _status(setting, UNDECLARED) == 200, timeout=60, what="ALLOW_ANY passes an undeclared host")
    cluster.apply(
        {
            "apiVersion": "networking.istio.io/v1",
            "kind": "Sidecar",
            "metadata": {"name": "default", "namespace": NAMESPACE},
            "spec": {"outboundTrafficPolicy": {"mode": "REGISTRY_ONLY"}},
        }
    )
    try:
        eventually(lambda: _status(setting, UNDECLARED) is None, timeout=60, what=f"{UNDECLARED} refused")
        eventually(lambda: _status(setting, DECLARED) == 200, timeout=30, what=f"{DECLARED} still reached")
    finally:
        cluster.delete("Sidecar", NAMESPACE, "default")
