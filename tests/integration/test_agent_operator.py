"""The agent as its cluster's operator, against a real kube-apiserver: an API CR made locally (kubectl)
shows up in the control plane with its origin and follows its edits and deletion; an edit to a managed
CR (drift) is reverted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from meshplane.model.resource import API_VERSION
from meshplane_testing.documents import api, unique
from meshplane_testing.eventually import eventually
from meshplane_testing.kube import ORDERS_SERVICE, KubeAPIServer, cr_with_base_path
from meshplane_testing.meshplane import run_agent, run_server


def local_api(name: str, base_path: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "API",
        "metadata": {"name": name, "namespace": "shop", "labels": {"team": "orders"}},
        "spec": {"basePath": base_path, "backends": [{"host": "orders.shop.svc", "port": 8080}]},
    }


def test_an_api_made_with_kubectl_appears_in_the_control_plane_and_follows(
    tmp_path: Path, kube_apiserver: KubeAPIServer
) -> None:
    name = unique("local")
    kube_apiserver.create_namespace("shop")
    with (
        run_server(tmp_path) as server,
        server.http() as rest,
    ):
        project = {"kind": "Project", "metadata": {"name": "shop"}, "spec": {}}
        rest.post("/v1/projects", json=project).raise_for_status()
        server.allow_publishing("edge-1", "shop")
        with run_agent(tmp_path, "edge-1", server, kubeconfig=kube_apiserver.kubeconfig):

            def at_server(base_path: str) -> dict[str, Any] | None:
                response = rest.get(f"/v1/projects/shop/apis/{name}")
                if response.status_code != 200:
                    return None
                obj = response.json()
                return obj if obj["spec"]["basePath"] == base_path else None

            kube_apiserver.kubectl("apply", "-f", "-", input=json.dumps(local_api(name, "/local")))
            shown = eventually(lambda: at_server("/local"), timeout=20.0, what="the local API at the server")
            assert shown["metadata"]["origin"] == "cluster/edge-1"
            assert shown["metadata"]["labels"] == {"team": "orders"}

            kube_apiserver.kubectl("apply", "-f", "-", input=json.dumps(local_api(name, "/local-v2")))
            eventually(lambda: at_server("/local-v2"), timeout=20.0, what="the server's copy to follow the edit")
            # The cluster's own object is not taken over by the control plane.
            cr = kube_apiserver.kubectl("get", "apis.meshplane.io", name, "-n", "shop", "-o", "json")
            assert "meshplane.io/managed-by" not in (json.loads(cr)["metadata"].get("labels") or {})

            kube_apiserver.kubectl("delete", "apis.meshplane.io", name, "-n", "shop")
            eventually(
                lambda: rest.get(f"/v1/projects/shop/apis/{name}").status_code == 404,
                timeout=20.0,
                what="the API gone at the server",
            )


def test_drift_on_a_managed_cr_is_reverted(tmp_path: Path, kube_apiserver: KubeAPIServer) -> None:
    name = unique("orders")
    with (
        run_server(tmp_path) as server,
        run_agent(tmp_path, "edge-1", server, kubeconfig=kube_apiserver.kubeconfig),
        server.http() as rest,
    ):
        rest.put(
            f"/v1/projects/default/apis/{name}", json=api(name, basePath="/orders", backends=[ORDERS_SERVICE])
        ).raise_for_status()
        eventually(cr_with_base_path(kube_apiserver, name, "/orders"), timeout=20.0, what="the CR")

        with kube_apiserver.client() as client:
            client.patch(
                f"/apis/{API_VERSION}/namespaces/default/apis/{name}",
                headers={"Content-Type": "application/merge-patch+json"},
                json={"spec": {"basePath": "/hijacked"}},
            ).raise_for_status()
        # Reverted by the watch, well before the 30 s resync.
        eventually(cr_with_base_path(kube_apiserver, name, "/orders"), timeout=10, what="the drift to be reverted")
        rest.delete(f"/v1/projects/default/apis/{name}").raise_for_status()
