"""The cluster's Gateway API routes reported up: a real kube-apiserver with the standard-channel CRDs, a real
server, the agent of edge-1 serving the cluster's Gateway API and an agent of edge-2 with no Kubernetes. A route
attached to a Gateway of ours shows at the server with its origin and the status the agent wrote, follows its
changes and its deletion, is listed by REST and the CLI, cannot be adopted and reaches no other cluster; a route
in a namespace whose project edge-1 may not publish into is refused, not stored, and said once in the log."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import yaml
from google.protobuf import struct_pb2

from meshplane.gatewayapi.state import CONTROLLER_NAME
from meshplane.model.crds import custom_resource_definitions
from meshplane.proto.v1.control_plane_pb2 import LocalObject
from meshplane_testing.cli import meshplane
from meshplane_testing.documents import unique
from meshplane_testing.eventually import eventually
from meshplane_testing.gatewayapi import apply, gateway, gateway_api_crds, gateway_class, http_route, object_path
from meshplane_testing.kube import KubeAPIServer, start_kube_apiserver
from meshplane_testing.meshplane import AgentProcess, ServerProcess, run_agent, run_server

pytestmark = pytest.mark.timeout(120)

POOL = "127.0.23.10-127.0.23.19"
REFUSAL_LOG = "the control plane does not show this namespace's routes"


@dataclass
class Fleet:
    kube: KubeAPIServer
    server: ServerProcess
    agent: AgentProcess
    other: AgentProcess
    open_ns: str
    """A namespace whose project edge-1 may publish into, with a Gateway of ours that takes routes from all."""
    closed_ns: str
    """A namespace whose project exists but edge-1 may not publish into."""
    gateway: str
    home: Path


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    gateway_api_crds()  # missing: skip (fail in CI) before anything starts
    home = tmp_path_factory.mktemp("gatewayapi-report")
    open_ns, closed_ns, class_name, gateway_name = unique("shop"), unique("closed"), unique("meshplane"), "edge"
    with start_kube_apiserver(home, custom_resource_definitions()) as kube, run_server(home) as server:
        kube.install_crds(gateway_api_crds())
        for namespace in (open_ns, closed_ns):
            kube.create_namespace(namespace)
            server.put({"kind": "Project", "metadata": {"name": namespace}, "spec": {}})
        server.allow_publishing("edge-1", open_ns)
        apply(kube, gateway_class(class_name))
        everyone = gateway(open_ns, gateway_name, class_name, 8080)
        everyone["spec"]["listeners"][0]["allowedRoutes"] = {"namespaces": {"from": "All"}}
        apply(kube, everyone)
        with (
            run_agent(
                home, "edge-1", server, kubeconfig=kube.kubeconfig, extra=["--gateway-api-addresses", POOL]
            ) as agent,
            run_agent(home, "edge-2", server) as other,
        ):
            yield Fleet(kube, server, agent, other, open_ns, closed_ns, gateway_name, home)


def edge_1(home: Path, server: ServerProcess, kube: KubeAPIServer, ports: tuple[int, int] | None = None) -> Any:
    """The agent of edge-1, serving the cluster's Gateway API from its pool (its state kept across restarts)."""
    return run_agent(
        home, "edge-1", server, kubeconfig=kube.kubeconfig, ports=ports, extra=["--gateway-api-addresses", POOL]
    )


def route_at_server(rest: httpx.Client, plural: str, project: str, name: str) -> dict[str, Any] | None:
    response = rest.get(f"/v1/projects/{project}/{plural}/{name}")
    return response.json() if response.status_code == 200 else None


def ours(shown: dict[str, Any] | None) -> dict[str, Any] | None:
    """The server's copy of our controller's parents entry, once the agent has written one."""
    parents = ((shown or {}).get("status") or {}).get("parents") or []
    return next((p for p in parents if p["controllerName"] == CONTROLLER_NAME), None)


def route_to(fleet: Fleet, namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    route = http_route(namespace, name, fleet.gateway, "orders", 8080)
    route["spec"]["parentRefs"][0]["namespace"] = fleet.open_ns
    route["spec"].update(spec)
    return route


def test_a_route_made_in_the_cluster_shows_at_the_server_with_its_origin_status_changes_and_deletion(
    fleet: Fleet,
) -> None:
    name = unique("orders")
    with fleet.server.http() as rest:
        route = route_to(fleet, fleet.open_ns, name, hostnames=["shop.example"])
        route["metadata"]["labels"] = {"team": "orders"}
        apply(fleet.kube, route)

        shown = eventually(
            lambda: (s := route_at_server(rest, "httproutes", fleet.open_ns, name)) and ours(s) and s,
            timeout=30.0,
            what="the route and its status at the server",
        )

        assert shown["metadata"]["origin"] == "cluster/edge-1"
        assert shown["metadata"]["labels"] == {"team": "orders"}
        assert shown["spec"]["hostnames"] == ["shop.example"]
        assert shown["spec"]["parentRefs"][0]["name"] == fleet.gateway
        conditions = {c["type"]: c for c in ours(shown)["conditions"]}
        assert conditions["Accepted"]["status"] == "True"
        assert (conditions["ResolvedRefs"]["status"], conditions["ResolvedRefs"]["reason"]) == (
            "False",
            "BackendNotFound",
        )
        assert "clusters" not in shown["status"]  # placed nowhere

        listed = rest.get(f"/v1/projects/{fleet.open_ns}/httproutes").raise_for_status().json()
        assert [(i["metadata"]["name"], i["metadata"]["origin"]) for i in listed["items"]] == [(name, "cluster/edge-1")]

        apply(fleet.kube, route_to(fleet, fleet.open_ns, name, hostnames=["shop.example", "www.shop.example"]))
        eventually(
            lambda: (
                (s := route_at_server(rest, "httproutes", fleet.open_ns, name))
                and s["spec"]["hostnames"] == ["shop.example", "www.shop.example"]
            ),
            timeout=30.0,
            what="the server's copy to follow the change",
        )

        fleet.kube.kubectl("delete", "httproutes.gateway.networking.k8s.io", name, "-n", fleet.open_ns)
        eventually(
            lambda: route_at_server(rest, "httproutes", fleet.open_ns, name) is None,
            timeout=30.0,
            what="the route gone at the server",
        )


def test_a_grpc_route_is_shown_and_listed_by_the_cli(fleet: Fleet) -> None:
    name = unique("greeter")
    route = route_to(fleet, fleet.open_ns, name)
    route["kind"] = "GRPCRoute"
    route["spec"]["rules"] = [
        {"matches": [{"method": {"service": "shop.Greeter"}}], "backendRefs": [{"name": "greeter", "port": 50051}]}
    ]
    apply(fleet.kube, route)
    with fleet.server.http() as rest:
        eventually(
            lambda: ours(route_at_server(rest, "grpcroutes", fleet.open_ns, name)),
            timeout=30.0,
            what="the GRPCRoute and its status at the server",
        )

    table = meshplane("get", "grpcroutes", "-p", fleet.open_ns, server=fleet.server)
    as_yaml = meshplane("get", "grpcroutes", name, "-p", fleet.open_ns, "-o", "yaml", server=fleet.server)

    assert table.returncode == 0, table.stderr
    assert name in table.stdout
    assert as_yaml.returncode == 0, as_yaml.stderr
    shown = yaml.safe_load(as_yaml.stdout)
    assert shown["metadata"]["origin"] == "cluster/edge-1"
    assert shown["spec"]["rules"][0]["matches"][0]["method"]["service"] == "shop.Greeter"


def test_a_route_cannot_be_adopted_nor_written_nor_orphaned_and_reaches_no_other_cluster(fleet: Fleet) -> None:
    name = unique("kept")
    apply(fleet.kube, route_to(fleet, fleet.open_ns, name))
    path = f"/v1/projects/{fleet.open_ns}/httproutes/{name}"
    with fleet.server.http() as rest:
        eventually(lambda: rest.get(path).status_code == 200, timeout=30.0, what="the route at the server")

        adopted = rest.post(f"{path}/adopt", json={"placement": {"clusters": ["edge-2"]}})
        written = rest.put(path, json={"kind": "HTTPRoute", "metadata": {"name": name}, "spec": {}})

        assert adopted.status_code == 409, adopted.text
        assert "stays in the cluster that made it" in adopted.json()["detail"]
        assert written.status_code == 405
        project_deleted = rest.delete(f"/v1/projects/{fleet.open_ns}")
        assert project_deleted.status_code == 409, project_deleted.text
        assert "httproutes" in project_deleted.json()["detail"]
        assert rest.get(path).json()["metadata"]["origin"] == "cluster/edge-1"
    for agent in (fleet.agent, fleet.other):
        dump = httpx.get(f"http://{agent.admin_address}/config_dump", timeout=5).raise_for_status().json()
        assert not [o for o in dump["objects"] if o["kind"] in ("HTTPRoute", "GRPCRoute")]


def test_a_route_in_a_namespace_the_cluster_may_not_publish_into_is_refused_and_said_once(fleet: Fleet) -> None:
    refused = [unique("refused"), unique("refused")]
    for name in refused:
        apply(fleet.kube, route_to(fleet, fleet.closed_ns, name))
    # Reports go up in order: once a later one is shown, the refused ones have been answered.
    marker = unique("after")
    apply(fleet.kube, route_to(fleet, fleet.open_ns, marker))
    with fleet.server.http() as rest:
        eventually(
            lambda: ours(route_at_server(rest, "httproutes", fleet.open_ns, marker)),
            timeout=30.0,
            what="the route reported after the refused ones",
        )
        for name in refused:
            assert route_at_server(rest, "httproutes", fleet.closed_ns, name) is None
        assert rest.get(f"/v1/projects/{fleet.closed_ns}/httproutes").json()["items"] == []

    told = [line for line in fleet.agent.process.log().splitlines() if REFUSAL_LOG in line]
    assert len(told) == 1, told
    assert fleet.closed_ns in told[0]
    with fleet.kube.client() as client:
        kept = client.get(object_path("HTTPRoute", fleet.closed_ns, refused[0]))
    assert kept.status_code == 200  # the cluster's own route is untouched


def struct(value: dict[str, Any]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(value)
    return out


def test_a_reported_route_of_the_wrong_shape_is_refused_at_its_field_and_nothing_is_stored(fleet: Fleet) -> None:
    fleet.server.allow_publishing("edge-3", fleet.open_ns)
    spec = {"parentRefs": [{"name": fleet.gateway}]}
    entry = {"parentRef": {"name": fleet.gateway}, "controllerName": CONTROLLER_NAME, "conditions": []}
    bad_spec = LocalObject(
        kind="HTTPRoute", project=fleet.open_ns, name="bad-spec", spec=struct({"rules": [{"retry": {}}]})
    )
    bad_status = LocalObject(
        kind="HTTPRoute",
        project=fleet.open_ns,
        name="bad-status",
        spec=struct(spec),
        status=struct({"parents": [{**entry, "conditions": [{"type": "Accepted", "status": "Maybe"}]}]}),
    )
    good = LocalObject(
        kind="HTTPRoute", project=fleet.open_ns, name="good", spec=struct(spec), status=struct({"parents": [entry]})
    )

    codes = fleet.server.report_objects("edge-3", bad_spec, bad_status, good)

    assert codes == [grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OK]
    with fleet.server.http() as rest:
        assert route_at_server(rest, "httproutes", fleet.open_ns, "bad-spec") is None
        assert route_at_server(rest, "httproutes", fleet.open_ns, "bad-status") is None
        assert route_at_server(rest, "httproutes", fleet.open_ns, "good")["status"]["parents"][0]["controllerName"] == (
            CONTROLLER_NAME
        )
    assert fleet.server.scrape().total("meshplane_reports_refused_total", cluster="edge-3", reason="invalid") == 2


def test_a_route_deleted_while_the_agent_was_down_is_withdrawn_when_it_is_back(fleet: Fleet) -> None:
    """Last in the module: it stops the module's agent of edge-1 for good."""
    name = unique("while-down")
    apply(fleet.kube, route_to(fleet, fleet.open_ns, name))
    with fleet.server.http() as rest:
        eventually(
            lambda: ours(route_at_server(rest, "httproutes", fleet.open_ns, name)),
            timeout=30.0,
            what="the route at the server",
        )
        fleet.agent.process.stop()
        fleet.kube.kubectl("delete", "httproutes.gateway.networking.k8s.io", name, "-n", fleet.open_ns)
        assert route_at_server(rest, "httproutes", fleet.open_ns, name) is not None

        with edge_1(fleet.home, fleet.server, fleet.kube, (fleet.agent.xds_port, fleet.agent.gateway_port)):
            eventually(
                lambda: route_at_server(rest, "httproutes", fleet.open_ns, name) is None,
                timeout=30.0,
                what="the route withdrawn once the agent is back",
            )
