"""The agent as its cluster's applier, against a real kube-apiserver: delivered objects become CRs,
follow their changes, are collected when removed (also while the agent was down), and an object the
API server refuses ends Failed with the API server's message in its per-cluster status."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from meshplane_testing.documents import api, unique
from meshplane_testing.eventually import eventually
from meshplane_testing.kube import ORDERS_SERVICE, KubeAPIServer, cr_with_base_path, custom_resource
from meshplane_testing.meshplane import run_agent, run_server

MANAGED_BY = "meshplane.io/managed-by"
DELIVERED_VERSION = "meshplane.io/delivered-version"


def test_a_delivered_api_becomes_a_cr_that_follows_changes_and_removal(
    tmp_path: Path, kube_apiserver: KubeAPIServer
) -> None:
    name = unique("orders")
    with (
        run_server(tmp_path) as server,
        run_agent(tmp_path, "edge-1", server, kubeconfig=kube_apiserver.kubeconfig),
        server.http() as rest,
    ):
        rest.put(
            f"/v1/projects/default/apis/{name}", json=api(name, basePath="/orders", backends=[ORDERS_SERVICE])
        ).raise_for_status()
        created = eventually(cr_with_base_path(kube_apiserver, name, "/orders"), timeout=20.0, what="the CR")
        assert created["metadata"]["labels"][MANAGED_BY] == "control-plane"
        assert created["spec"]["backends"][0]["host"] == "orders.shop.svc"
        first_version = created["metadata"]["annotations"][DELIVERED_VERSION]
        assert first_version

        rest.put(
            f"/v1/projects/default/apis/{name}", json=api(name, basePath="/orders-v2", backends=[ORDERS_SERVICE])
        ).raise_for_status()
        updated = eventually(
            cr_with_base_path(kube_apiserver, name, "/orders-v2"), timeout=20.0, what="the CR to be updated"
        )
        assert updated["metadata"]["annotations"][DELIVERED_VERSION] != first_version
        assert updated["metadata"]["uid"] == created["metadata"]["uid"]

        rest.delete(f"/v1/projects/default/apis/{name}").raise_for_status()
        eventually(lambda: custom_resource(kube_apiserver, name) is None, timeout=20.0, what="the CR to be deleted")


def test_an_api_removed_while_the_agent_was_down_is_collected_when_it_starts(
    tmp_path: Path, kube_apiserver: KubeAPIServer
) -> None:
    kept, removed = unique("kept"), unique("removed")
    with run_server(tmp_path) as server, server.http() as rest:
        for name in (kept, removed):
            rest.put(
                f"/v1/projects/default/apis/{name}", json=api(name, basePath=f"/{name}", backends=[ORDERS_SERVICE])
            ).raise_for_status()
        with run_agent(tmp_path, "edge-1", server, kubeconfig=kube_apiserver.kubeconfig):
            for name in (kept, removed):
                eventually(cr_with_base_path(kube_apiserver, name, f"/{name}"), timeout=20.0, what=f"CR {name}")

        rest.delete(f"/v1/projects/default/apis/{removed}").raise_for_status()
        assert custom_resource(kube_apiserver, removed) is not None

        with run_agent(tmp_path, "edge-1", server, kubeconfig=kube_apiserver.kubeconfig):
            eventually(
                lambda: custom_resource(kube_apiserver, removed) is None,
                timeout=20.0,
                what="the removed API's CR to go",
            )
            assert custom_resource(kube_apiserver, kept) is not None
        rest.delete(f"/v1/projects/default/apis/{kept}").raise_for_status()


def test_an_api_the_api_server_forbids_ends_failed_with_its_message(
    tmp_path: Path, kube_apiserver: KubeAPIServer
) -> None:
    # An identity without any RBAC grant: the API server answers every apply with 403 Forbidden.
    token = kube_apiserver.service_account_token("meshplane-tests", unique("no-rbac"))
    kubeconfig = kube_apiserver.write_kubeconfig(tmp_path / "no-rbac.kubeconfig", token=token, user="no-rbac")
    name = unique("orders")
    with (
        run_server(tmp_path) as server,
        run_agent(tmp_path, "edge-1", server, kubeconfig=kubeconfig),
        server.http() as rest,
    ):
        rest.put(
            f"/v1/projects/default/apis/{name}", json=api(name, basePath="/orders", backends=[ORDERS_SERVICE])
        ).raise_for_status()

        def failed() -> dict[str, Any] | None:
            clusters = rest.get(f"/v1/projects/default/apis/{name}").json().get("status", {}).get("clusters", [])
            return next((c for c in clusters if c["cluster"] == "edge-1" and c["state"] == "Failed"), None)

        entry = eventually(failed, timeout=20.0, what="the API's status to show Failed")
        assert "forbidden" in entry["message"]
        assert "apis.meshplane.io" in entry["message"]
        assert custom_resource(kube_apiserver, name) is None
