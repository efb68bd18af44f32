"""Ingress addresses read from the cluster: where a Cluster declares none, its agent reports the addresses of
the ingress gateway Service's load balancer, and the DNS records of user-facing hosts point at them, against a
real kube-apiserver, server and agent."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from meshplane.client import load_documents
from meshplane_testing.eventually import eventually
from meshplane_testing.kube import KubeAPIServer
from meshplane_testing.meshplane import run_agent, run_server
from meshplane_testing.races import object_path

pytestmark = pytest.mark.timeout(120)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "intents"
MANIFEST = "type.googleapis.com/meshplane.v1.Manifest"
GATEWAY_NAMESPACE, GATEWAY_SERVICE = "istio-system", "istio-ingressgateway"
GATEWAY_PATH = f"/api/v1/namespaces/{GATEWAY_NAMESPACE}/services/{GATEWAY_SERVICE}"
DECLARED_EDGE_2 = "203.0.113.12"
"""edge-2's ingress address in examples/intents/clusters.yaml."""


def put_examples(http: httpx.Client, edge_1_declares: list[str] | None) -> None:
    """The example fleet and its intents; edge-1 declares `edge_1_declares` (None: no ingressGateway)."""
    for file in ("clusters.yaml", "service-to-service.yaml", "user-facing.yaml"):
        for doc in load_documents((EXAMPLES / file).read_text()):
            if doc["kind"] == "Cluster" and doc["metadata"]["name"] == "edge-1":
                doc["spec"].pop("ingressGateway")
                if edge_1_declares is not None:
                    doc["spec"]["ingressGateway"] = {"addresses": edge_1_declares}
            response = http.put(object_path(doc), json=doc)
            assert response.status_code in (200, 201), response.text


def dns_targets(http: httpx.Client, cluster: str) -> set[str] | None:
    """The targets of the storefront's DNSEndpoint for public-dns as rendered for `cluster` (None: not there)."""
    items = http.get(f"/v1/clusters/{cluster}/resources").raise_for_status().json()["items"]
    for item in items:
        if item["typeUrl"] == MANIFEST and item["name"].endswith("/DNSEndpoint/storefront-dns.public-dns"):
            return {t for e in item["object"]["spec"]["endpoints"] for t in e["targets"]}
    return None


def load_balanced(ingress: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": GATEWAY_SERVICE, "namespace": GATEWAY_NAMESPACE},
        "spec": {"type": "LoadBalancer", "ports": [{"name": "https", "port": 443}], "selector": {"istio": "ingress"}},
        "status": {"loadBalancer": {"ingress": ingress}},
    }


@pytest.fixture
def ingress_gateway_service(kube_apiserver: KubeAPIServer) -> Iterator[None]:
    """The ingress gateway Service of the cluster, removed again after the test (the API server is shared)."""
    kube_apiserver.create_namespace(GATEWAY_NAMESPACE)
    yield
    with kube_apiserver.client() as client:
        client.delete(GATEWAY_PATH)


def set_load_balancer(kube: KubeAPIServer, ingress: list[dict[str, str]]) -> None:
    kube.apply(GATEWAY_PATH, {k: v for k, v in load_balanced(ingress).items() if k != "status"})
    kube.apply(f"{GATEWAY_PATH}/status", load_balanced(ingress))


@pytest.mark.usefixtures("ingress_gateway_service")
def test_a_cluster_without_declared_ingress_addresses_is_targeted_at_its_gateways_load_balancer(
    tmp_path: Path, kube_apiserver: KubeAPIServer
) -> None:
    with run_server(tmp_path) as server, server.http() as http:
        put_examples(http, edge_1_declares=None)
        # Before edge-1 says anything, only edge-2 has an address: it writes the record set alone.
        eventually(lambda: dns_targets(http, "edge-2") == {DECLARED_EDGE_2}, timeout=20.0, what="edge-2's record")

        set_load_balancer(kube_apiserver, [{"ip": "198.51.100.7"}])
        with run_agent(tmp_path, "edge-1", server, kubeconfig=kube_apiserver.kubeconfig):
            eventually(
                lambda: dns_targets(http, "edge-1") == {"198.51.100.7", DECLARED_EDGE_2},
                timeout=30.0,
                what="the record set written by edge-1 with its load balancer's address",
            )
            assert dns_targets(http, "edge-2") is None  # one writer per record set

            # The load balancer moves: so does the record.
            set_load_balancer(kube_apiserver, [{"ip": "198.51.100.8"}])
            eventually(
                lambda: dns_targets(http, "edge-1") == {"198.51.100.8", DECLARED_EDGE_2},
                timeout=30.0,
                what="the record to follow the load balancer",
            )


@pytest.mark.usefixtures("ingress_gateway_service")
def test_declared_ingress_addresses_win_over_the_reported_ones(tmp_path: Path, kube_apiserver: KubeAPIServer) -> None:
    with run_server(tmp_path) as server, server.http() as http:
        put_examples(http, edge_1_declares=["203.0.113.99"])
        set_load_balancer(kube_apiserver, [{"ip": "198.51.100.7"}])
        with run_agent(tmp_path, "edge-1", server, kubeconfig=kube_apiserver.kubeconfig):
            eventually(
                lambda: any(e["spec"]["namespace"] == GATEWAY_NAMESPACE for e in reported(http)),
                timeout=30.0,
                what="edge-1's ingress gateway Service reported",
            )
            assert dns_targets(http, "edge-1") == {"203.0.113.99", DECLARED_EDGE_2}


def reported(http: httpx.Client) -> list[dict[str, Any]]:
    """Every ServiceEndpoint edge-1 reported, whichever project it landed in."""
    found = []
    for project in ("default", "shop"):
        response = http.get(f"/v1/projects/{project}/serviceendpoints").raise_for_status()
        found += [e for e in response.json()["items"] if e["spec"]["cluster"] == "edge-1"]
    return found
