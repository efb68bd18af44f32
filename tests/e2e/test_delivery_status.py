"""Delivery status: what each cluster's gateways did with an object reaches the object's status,
an Envoy rejection included, and a rejected version is neither resent nor allowed to displace the
configuration Envoy still serves."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from meshplane.agent.bootstrap import envoy_bootstrap
from meshplane_testing import documents
from meshplane_testing.envoy import EnvoyProcess, run_envoy_config
from meshplane_testing.eventually import eventually
from meshplane_testing.gateway import Gateway, from_upstream, status
from meshplane_testing.meshplane import AgentProcess, run_agent, run_server
from meshplane_testing.process import free_port
from meshplane_testing.upstream import run_upstream


def api(port: int, operations: list[dict]) -> dict:
    return documents.api("orders", operations=operations, backends=[documents.backend(port)])


def wait_for_status(
    rest: httpx.Client, expect: Callable[[list[dict]], bool], timeout: float = 15.0, path: str = "apis/orders"
) -> dict:
    """The object at `path` (API `orders` unless told) once its per-cluster status entries satisfy `expect`."""

    def matched() -> dict | None:
        shown = rest.get(f"/v1/projects/default/{path}").json()
        return shown if expect(shown.get("status", {}).get("clusters", [])) else None

    return eventually(matched, timeout=timeout, interval=0.1, what=f"the status of {path}")


def strict_bootstrap(agent: AgentProcess) -> dict:
    """A gateway whose operator allows only tiny regexes: templated paths, or a regex naming an
    application's uid, are rejected by Envoy itself."""
    bootstrap = envoy_bootstrap("gw-strict", "127.0.0.1", agent.xds_port, admin_port=free_port())
    bootstrap["layered_runtime"] = {
        "layers": [{"name": "strict", "static_layer": {"re2.max_program_size.error_level": 15}}]
    }
    return bootstrap


def rejected_route_updates(envoy: EnvoyProcess) -> int:
    _, body = envoy.admin("/stats?filter=rds.gateway.update_rejected")
    return sum(int(line.rsplit(":", 1)[1]) for line in body.splitlines() if line.strip())


@dataclass
class StrictEdge:
    """A server, its agent `edge-1` and a strict gateway serving API `orders` (GET /items) from upstream `one`."""

    port: int
    rest: httpx.Client
    envoy: EnvoyProcess
    gateway: Gateway


@contextlib.contextmanager
def strict_edge(tmp_path: Path) -> Iterator[StrictEdge]:
    with (
        run_upstream("one") as (port, _),
        run_server(tmp_path) as server,
        run_agent(tmp_path, "edge-1", server.grpc_address) as agent,
        server.http() as rest,
        run_envoy_config(tmp_path, "gw-strict", strict_bootstrap(agent)) as envoy,
    ):
        envoy.wait_listener(agent.gateway_port)
        gateway = Gateway(agent.gateway_port)
        try:
            rest.put("/v1/projects/default/apis/orders", json=api(port, [{"method": "GET", "path": "/items"}]))
            gateway.wait_for("/orders/items", from_upstream("one"))
            yield StrictEdge(port, rest, envoy, gateway)
        finally:
            gateway.close()


def test_an_envoy_rejection_is_reported_kept_out_and_not_resent(tmp_path: Path) -> None:
    with strict_edge(tmp_path) as edge:
        port, rest, envoy, gateway = edge.port, edge.rest, edge.envoy, edge.gateway
        good = wait_for_status(rest, lambda c: [e["state"] for e in c] == ["Applied"])
        assert good["status"]["clusters"][0]["cluster"] == "edge-1"

        templated = [
            {"method": "GET", "path": "/items"},
            {"method": "GET", "path": "/items/{id}/parts/{part}/x/{y}"},
        ]
        rest.put("/v1/projects/default/apis/orders", json=api(port, templated))
        failed = wait_for_status(rest, lambda c: [e["state"] for e in c] == ["Failed"])
        entry = failed["status"]["clusters"][0]
        assert "RE2 program size" in entry["message"]
        assert entry["version"] != good["status"]["clusters"][0]["version"]

        # The last good configuration stays in force, and the rejected one is not offered again.
        assert gateway.request("GET", "/orders/items").status_code == 200
        assert gateway.request("GET", "/orders/items/7/parts/8/x/9").status_code == 404
        rejections = rejected_route_updates(envoy)
        time.sleep(2)
        assert rejected_route_updates(envoy) == rejections

        cluster = rest.get("/v1/clusters/edge-1").json()
        assert cluster["status"]["outOfDate"] == 1

        # A new version goes through again.
        rest.put("/v1/projects/default/apis/orders", json=api(port, [{"method": "POST", "path": "/items"}]))
        gateway.wait_for("/orders/items", from_upstream("one"), method="POST")
        gateway.wait_for("/orders/items", status(404))
        wait_for_status(rest, lambda c: [e["state"] for e in c] == ["Applied"])


def test_an_application_deleted_after_its_rejection_no_longer_holds_back_the_gateway(tmp_path: Path) -> None:
    with strict_edge(tmp_path) as edge:
        port, rest, envoy, gateway = edge.port, edge.rest, edge.envoy, edge.gateway

        # The regex naming the application's uid is too big for this gateway.
        created = rest.put("/v1/projects/default/applications/buyer", json=documents.application("buyer"))
        uid = created.raise_for_status().json()["metadata"]["uid"]
        wait_for_status(rest, lambda c: [e["state"] for e in c] == ["Failed"], path="applications/buyer")

        # The set Envoy refused also held the filter configs it kept serving: only the new regex is to blame,
        # or every later configuration keeping those would count as refused too.
        rest.delete("/v1/projects/default/applications/buyer").raise_for_status()
        rest.put("/v1/projects/default/apis/orders", json=api(port, [{"method": "POST", "path": "/items"}]))
        gateway.wait_for("/orders/items", from_upstream("one"), method="POST")
        wait_for_status(rest, lambda c: [e["state"] for e in c] == ["Applied"])
        _, dump = envoy.admin("/config_dump")
        assert uid not in dump
