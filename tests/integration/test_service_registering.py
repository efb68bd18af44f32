"""Service registering against a real kube-apiserver, with a real server and agent: the cluster's Services
appear as read-only ServiceEndpoints in the project of their namespace and follow changes and deletions
(also those made while the agent was down), and an API backend naming a service goes to its cluster IP."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from meshplane_testing import documents
from meshplane_testing.cli import meshplane
from meshplane_testing.documents import unique
from meshplane_testing.envoy import unversioned
from meshplane_testing.eventually import eventually
from meshplane_testing.kube import KubeAPIServer
from meshplane_testing.meshplane import AgentProcess, run_agent, run_server

pytestmark = pytest.mark.timeout(120)

GATEWAY = "203.0.113.7:15443"


def service(namespace: str, name: str, ports: list[dict[str, Any]], **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"ports": ports, "selector": {"app": name}},
    }


def put_service(kube: KubeAPIServer, body: dict[str, Any]) -> dict[str, Any]:
    meta = body["metadata"]
    return kube.apply(f"/api/v1/namespaces/{meta['namespace']}/services/{meta['name']}", body)


def delete_service(kube: KubeAPIServer, namespace: str, name: str) -> None:
    with kube.client() as client:
        client.delete(f"/api/v1/namespaces/{namespace}/services/{name}").raise_for_status()


def endpoints(rest: httpx.Client, project: str) -> dict[str, dict[str, Any]]:
    """The project's ServiceEndpoints by `<namespace>/<service>`."""
    items = rest.get(f"/v1/projects/{project}/serviceendpoints").raise_for_status().json()["items"]
    return {f"{item['spec']['namespace']}/{item['spec']['service']}": item for item in items}


def endpoint(rest: httpx.Client, project: str, namespace: str, name: str) -> dict[str, Any] | None:
    return endpoints(rest, project).get(f"{namespace}/{name}")


def add_project(rest: httpx.Client, name: str) -> None:
    rest.post("/v1/projects", json=documents.project(name)).raise_for_status()


def test_services_appear_follow_their_changes_and_go(tmp_path: Path, kube_apiserver: KubeAPIServer) -> None:
    shop, loose = unique("shop"), unique("loose")
    for namespace in (shop, loose):
        kube_apiserver.create_namespace(namespace)
    with run_server(tmp_path) as server, server.http() as rest:
        add_project(rest, shop)
        with run_agent(
            tmp_path, "edge-1", server, kubeconfig=kube_apiserver.kubeconfig, extra=["--east-west-gateway", GATEWAY]
        ):
            ports = [{"name": "http", "port": 8080, "targetPort": 9000}, {"name": "grpc", "port": 9090}]
            created = put_service(kube_apiserver, service(shop, "orders", ports, app="orders", tier="backend"))
            shown = eventually(
                lambda: endpoint(rest, shop, shop, "orders"), timeout=20.0, what="the service's endpoint"
            )
            assert shown["metadata"]["origin"] == "cluster/edge-1"
            assert shown["metadata"]["labels"] == {"app": "orders", "tier": "backend", "meshplane.io/cluster": "edge-1"}
            assert shown["spec"] == {
                "cluster": "edge-1",
                "namespace": shop,
                "service": "orders",
                "ports": [
                    {"name": "http", "port": 8080, "protocol": "TCP", "targetPort": 9000},
                    {"name": "grpc", "port": 9090, "protocol": "TCP", "targetPort": 9090},
                ],
                "clusterIPs": created["spec"]["clusterIPs"],
                "eastWestGateway": {"address": "203.0.113.7", "port": 15443},
            }

            # Read-only for users, and listed by the CLI.
            name = shown["metadata"]["name"]
            assert rest.put(f"/v1/projects/{shop}/serviceendpoints/{name}", json=shown).status_code == 405
            listed = meshplane("get", "serviceendpoints", "-p", shop, "-o", "json", server=server)
            assert listed.returncode == 0, listed.stderr
            assert [item["metadata"]["name"] for item in json.loads(listed.stdout)] == [name]

            put_service(kube_apiserver, service(shop, "orders", ports[:1], app="orders", tier="frontend"))
            eventually(
                lambda: (
                    (e := endpoint(rest, shop, shop, "orders")) is not None
                    and len(e["spec"]["ports"]) == 1
                    and e["metadata"]["labels"]["tier"] == "frontend"
                ),
                timeout=20.0,
                what="the endpoint to follow the change",
            )

            # A namespace no project is named after lands in `default`, and moves while such a project exists.
            put_service(kube_apiserver, service(loose, "db", [{"port": 5432}]))
            eventually(
                lambda: endpoint(rest, "default", loose, "db"),
                timeout=20.0,
                what="the loose service in project default",
            )
            add_project(rest, loose)
            eventually(
                lambda: endpoint(rest, loose, loose, "db"), timeout=20.0, what="the loose service in its own project"
            )
            assert endpoint(rest, "default", loose, "db") is None
            rest.delete(f"/v1/projects/{loose}").raise_for_status()  # its endpoints do not hold it back
            eventually(
                lambda: endpoint(rest, "default", loose, "db"),
                timeout=20.0,
                what="the loose service back in project default",
            )

            delete_service(kube_apiserver, shop, "orders")
            eventually(lambda: endpoint(rest, shop, shop, "orders") is None, timeout=20.0, what="the endpoint to go")


def test_services_deleted_while_the_agent_was_down_go_once_it_is_back(
    tmp_path: Path, kube_apiserver: KubeAPIServer
) -> None:
    namespace = unique("shop")
    kube_apiserver.create_namespace(namespace)
    for name in ("kept", "dropped"):
        put_service(kube_apiserver, service(namespace, name, [{"port": 80}]))
    with run_server(tmp_path) as server, server.http() as rest:
        add_project(rest, namespace)
        with run_agent(tmp_path, "edge-1", server, kubeconfig=kube_apiserver.kubeconfig):
            eventually(lambda: len(endpoints(rest, namespace)) == 2, timeout=20.0, what="both endpoints")

        delete_service(kube_apiserver, namespace, "dropped")
        put_service(kube_apiserver, service(namespace, "added", [{"port": 80}]))
        assert sorted(endpoints(rest, namespace)) == [f"{namespace}/dropped", f"{namespace}/kept"]

        with run_agent(tmp_path, "edge-1", server, kubeconfig=kube_apiserver.kubeconfig):
            eventually(
                lambda: sorted(endpoints(rest, namespace)) == [f"{namespace}/added", f"{namespace}/kept"],
                timeout=20.0,
                what="the catalog to match the cluster again",
            )


def gateway_config(agent: AgentProcess) -> dict[str, dict[str, Any]]:
    """Type URL (short) -> resource name (API clusters without their upstream digest) -> resource, as the agent
    serves its gateways."""
    dump = httpx.get(f"http://{agent.admin_address}/config_dump", timeout=5).raise_for_status().json()
    return {
        group["typeUrl"].rsplit(".", 1)[-1]: {unversioned(r["name"]): r["resource"] for r in group["resources"]}
        for group in dump["gateways"]
    }


def test_an_api_backend_naming_a_service_goes_to_its_cluster_ip(tmp_path: Path, kube_apiserver: KubeAPIServer) -> None:
    namespace, present, absent = unique("shop"), unique("present"), unique("absent")
    kube_apiserver.create_namespace(namespace)
    created = put_service(kube_apiserver, service(namespace, "orders", [{"port": 8080}]))
    cluster_ip = created["spec"]["clusterIP"]
    with (
        run_server(tmp_path) as server,
        run_agent(tmp_path, "edge-1", server, kubeconfig=kube_apiserver.kubeconfig) as agent,
        server.http() as rest,
    ):
        for name, target in ((present, "orders"), (absent, "missing")):
            body = {
                "kind": "API",
                "metadata": {"name": name},
                "spec": {"basePath": f"/{name}", "backends": [{"service": f"{target}.{namespace}", "port": 8080}]},
            }
            rest.put(f"/v1/projects/default/apis/{name}", json=body).raise_for_status()

        def served() -> dict[str, dict[str, Any]] | None:
            """Both APIs reached the gateways (they may arrive in separate updates)."""
            config = gateway_config(agent)
            names = [
                r["name"]
                for t in config["RouteConfiguration"].values()
                for h in t.get("virtual_hosts", [])  # a route table the gateways get before any API has none
                for r in h.get("routes", [])
            ]
            both = any(name.startswith(f"default/{absent} ") for name in names)
            return config if both and f"api.default.{present}.0" in config["ClusterLoadAssignment"] else None

        config = eventually(served, timeout=20.0, what="both APIs, one at the service's address")
        cluster = config["Cluster"][f"api.default.{present}.0"]
        assert cluster["type"] == "EDS"
        [endpoint] = config["ClusterLoadAssignment"][f"api.default.{present}.0"]["endpoints"][0]["lb_endpoints"]
        assert endpoint["endpoint"]["address"]["socket_address"] == {"address": cluster_ip, "port_value": 8080}

        assert f"api.default.{absent}.0" not in config["Cluster"]
        [table] = config["RouteConfiguration"].values()
        routes = [route for host in table["virtual_hosts"] for route in host["routes"]]
        [refused] = [route for route in routes if route["name"].startswith(f"default/{absent} ")]
        assert refused["direct_response"] == {
            "status": 503,
            "body": {"inline_string": f"service missing.{namespace} is not in this cluster\n"},
        }

        # The service appearing later is picked up without touching the API.
        put_service(kube_apiserver, service(namespace, "missing", [{"port": 8080}]))
        eventually(
            lambda: f"api.default.{absent}.0" in gateway_config(agent)["ClusterLoadAssignment"],
            timeout=20.0,
            what="the late service to be served",
        )
