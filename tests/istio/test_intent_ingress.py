"""An IngressIntent end to end on real Istio: the server renders it for the cluster, the cluster's agent
applies the objects to the cluster's API server, istiod configures the ingress gateway's Envoy, and a
request for the intent's host reaches the service's workload through its sidecar, whose policies admit the
ingress gateway (defect #3 of issue 18: they admitted the declared clients only, and the gateway got 403)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from meshplane.client import load_documents
from meshplane_testing.eventually import eventually
from meshplane_testing.istio import INGRESS, Fleet, ServicePort, Workload, start_gateway
from meshplane_testing.meshplane import run_agent, run_server
from meshplane_testing.races import object_path
from meshplane_testing.upstream import run_upstream

pytestmark = pytest.mark.timeout(300)

HOST = "catalog.example.com"
INTENTS = """
apiVersion: meshplane.io/v1alpha1
kind: Cluster
metadata: {name: cluster-a}
spec: {}
---
apiVersion: meshplane.io/v1alpha1
kind: Project
metadata: {name: catalog}
spec: {description: the catalog}
---
apiVersion: meshplane.io/v1alpha1
kind: LogicalCloud
metadata: {name: shelves, project: catalog}
spec:
  clusters: [{name: cluster-a, namespace: catalog}]
---
apiVersion: meshplane.io/v1alpha1
kind: ServiceIntent
metadata: {name: books, project: catalog}
spec:
  service: {name: books, app: books, port: 8080, protocol: HTTP}
  placement: {logicalCloud: shelves}
---
apiVersion: meshplane.io/v1alpha1
kind: IngressIntent
metadata: {name: storefront, project: catalog}
spec:
  hosts: [catalog.example.com]
  entities: [{name: public}]
  routes: [{match: {prefix: /}, to: {service: books, port: 8080}}]
  placement: {logicalCloud: shelves}
"""


def test_an_ingress_intent_carries_a_request_to_its_service(fleet: Fleet, tmp_path: Path) -> None:
    cluster = fleet["cluster-a"]
    # With a sidecar: the ingress gateway calls books over Istio mTLS, and books' ALLOW policy (rendered
    # from its ServiceIntent, which declares no client) must still admit the gateway's identity.
    books = Workload(
        "books",
        "catalog",
        cluster.new_address(),
        {"app": "books"},
        (ServicePort("http", 8080, 8080),),
        service_account="books",
        sidecar=True,
    )
    with (
        start_gateway(cluster, INGRESS) as ingress,
        run_upstream("books") as (upstream_port, seen),
        cluster.serve(books, {8080: upstream_port}),
        run_server(tmp_path) as server,
        run_agent(tmp_path, "cluster-a", server, kubeconfig=cluster.kube.kubeconfig),
        server.http() as http,
    ):
        for document in load_documents(INTENTS):
            response = http.put(object_path(document), json=document)
            assert response.status_code in (200, 201), response.text
        port = ingress.port(8080)

        def status() -> int | None:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/shelf", headers={"Host": HOST}, timeout=5).status_code
            except httpx.HTTPError:
                return None

        eventually(lambda: status() == 200, timeout=60, what=f"{HOST} routed by the rendered objects")
        assert seen[-1]["path"] == "/shelf"
