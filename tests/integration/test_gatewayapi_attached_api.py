"""An API of the control plane attached to a cluster's HTTPRoute, end to end: a real kube-apiserver with the
standard-channel CRDs, a real server, the agent of edge-1 serving the cluster's Gateway API and an Envoy on a
pod network reaching the upstream at a pod address. Until the route exists the API's status at the server
says so; once the agent serves it, the route asks for the API's keys (401), refuses a blocked subscription
(403), lets a subscriber in (200) and holds its plan's quota (429)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from meshplane.model.crds import custom_resource_definitions
from meshplane_testing.documents import unique
from meshplane_testing.eventually import eventually
from meshplane_testing.gatewayapi import (
    PodNetwork,
    apply,
    backend_service,
    condition,
    envoy_on_pod_network,
    gateway,
    gateway_api_crds,
    gateway_class,
    http_route,
    read,
)
from meshplane_testing.kube import KubeAPIServer, start_kube_apiserver
from meshplane_testing.meshplane import ServerProcess, run_agent, run_server
from meshplane_testing.process import free_port
from meshplane_testing.upstream import run_upstream

pytestmark = pytest.mark.timeout(180)

POOL = "127.0.24.10-127.0.24.19"
POD = "10.244.0.11"
QUOTA = 3


@dataclass
class Fleet:
    kube: KubeAPIServer
    server: ServerProcess
    network: PodNetwork
    project: str
    port: int
    keys: dict[str, str]


def document(kind: str, project: str, name: str, **spec: Any) -> dict[str, Any]:
    return {"kind": kind, "metadata": {"name": name, "project": project}, "spec": spec}


def api_status(fleet: Fleet) -> dict[str, Any] | None:
    """The API's delivery entry of edge-1 at the server, once there is one."""
    with fleet.server.http() as rest:
        stored = rest.get(f"/v1/projects/{fleet.project}/apis/orders").raise_for_status().json()
    entries = [entry for entry in (stored.get("status") or {}).get("clusters") or [] if entry["cluster"] == "edge-1"]
    return entries[0] if entries else None


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    gateway_api_crds()  # missing: skip (fail in CI) before anything starts
    home = tmp_path_factory.mktemp("gatewayapi-attached")
    project, class_name, port = unique("shop"), unique("meshplane"), free_port()
    ports = (free_port(), free_port())
    with (
        start_kube_apiserver(home, custom_resource_definitions()) as kube,
        run_server(home) as server,
        run_upstream("orders") as (upstream_port, _),
        envoy_on_pod_network(home, ports[0]) as (network, _),
        network.fabric.host(POD, {8080: upstream_port}),
    ):
        kube.install_crds(gateway_api_crds())
        kube.create_namespace(project)
        server.put({"kind": "Project", "metadata": {"name": project}, "spec": {}})
        apply(kube, gateway_class(class_name))
        apply(kube, gateway(project, "edge", class_name, port))
        backend_service(kube, project, "orders", 8080, POD, 8080)
        target = {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "orders"}
        server.put(document("API", project, "orders", targetRefs=[target], authentication={"apiKey": {}}))
        keys = {}
        with server.http() as rest:
            for app, state in (("mobile", "active"), ("web", "blocked")):
                server.put(document("Application", project, app))
                server.put(
                    document("Subscription", project, f"{app}-orders", application=app, api="orders", state=state)
                )
                issued = rest.post(f"/v1/projects/{project}/applications/{app}/keys", json={})
                assert issued.status_code == 201, issued.text
                keys[app] = issued.json()["key"]
        plan = {"kind": "SubscriptionPlan", "name": "default", "api": "orders"}
        server.put(
            document(
                "RateLimitPolicy",
                project,
                "orders-plan",
                target=plan,
                requestsPerUnit=QUOTA,
                unit="hour",
                scope="local",
            )
        )
        with run_agent(
            home, "edge-1", server, ports=ports, kubeconfig=kube.kubeconfig, extra=["--gateway-api-addresses", POOL]
        ):
            yield Fleet(kube, server, network, project, port, keys)


def test_until_the_route_exists_the_api_says_so_then_the_route_is_served_with_its_checks(fleet: Fleet) -> None:
    waiting = eventually(
        lambda: (entry := api_status(fleet)) is not None and entry["state"] != "Pending" and entry,
        timeout=60.0,
        what="the API's status from edge-1",
    )
    assert waiting["state"] == "Failed"
    expected = f"targets HTTPRoute {fleet.project}/orders, which no Gateway of this cluster serves"
    assert waiting["message"] == f"not served on this cluster: {expected}"

    apply(fleet.kube, http_route(fleet.project, "orders", "edge", "orders", 8080))
    eventually(
        lambda: (entry := api_status(fleet)) is not None and entry["state"] == "Applied",
        timeout=60.0,
        what="the API to be served on edge-1",
    )
    gateway_status = eventually(
        lambda: (
            (gw := read(fleet.kube, "Gateway", fleet.project, "edge"))
            and (programmed := condition(gw, "Programmed"))
            and programmed["status"] == "True"
            and gw
        ),
        timeout=30.0,
        what="the Gateway programmed",
    )
    address = gateway_status["status"]["addresses"][0]["value"]
    fleet.network.gateway(address, fleet.port)

    with httpx.Client(base_url=f"http://{address}:{fleet.port}", timeout=5) as http:

        def answer(app: str | None) -> int | str:
            headers = {"x-api-key": fleet.keys[app]} if app is not None else {}
            try:
                return http.get("/hello", headers=headers).status_code
            except httpx.HTTPError:
                return "no answer"  # until the listener is there

        eventually(lambda: answer(None) == 401, timeout=30.0, what="the route asking for a key")
        assert answer("web") == 403
        answers = [answer("mobile") for _ in range(QUOTA + 2)]

    assert answers == [200] * QUOTA + [429, 429], answers


def test_an_api_with_one_of_its_routes_missing_is_served_in_part_and_says_which(fleet: Fleet) -> None:
    apply(fleet.kube, http_route(fleet.project, "orders", "edge", "orders", 8080))
    routes = [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": name} for name in ("orders", "gone")]
    fleet.server.put(document("API", fleet.project, "orders", targetRefs=routes, authentication={"apiKey": {}}))

    expected = (
        f"served in part on this cluster: attached to HTTPRoute {fleet.project}/orders;"
        f" not to {fleet.project}/gone, which no Gateway of this cluster serves"
    )
    entry = eventually(
        lambda: (entry := api_status(fleet)) is not None and entry.get("message") == expected and entry,
        timeout=60.0,
        what="the API reported served in part",
    )
    assert entry["state"] == "Failed"
