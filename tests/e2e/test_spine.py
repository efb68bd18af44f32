"""The spine, end to end: an API declared at the server is served by a real Envoy in a cluster.

Three successive versions of the configuration, with real traffic checked after each, on SQLite and
on PostgreSQL: server, agent, Envoy and two upstreams are real processes on loopback.
"""

from __future__ import annotations

import json
from pathlib import Path

from meshplane_testing import documents
from meshplane_testing.envoy import run_envoy
from meshplane_testing.gateway import Gateway, from_upstream, status
from meshplane_testing.meshplane import run_agent, run_server
from meshplane_testing.north import blocking
from meshplane_testing.upstream import run_upstream


def orders_api(port: int, *, base_path: str = "/", operations: list[dict] | None = None) -> dict:
    return documents.api(
        "orders",
        labels={"team": "checkout"},
        operations=operations
        if operations is not None
        else [{"method": "GET", "path": "/items"}, {"method": "GET", "path": "/items/{id}"}],
        backends=[documents.backend(port, basePath=base_path, timeout="5s")],
    )


def test_api_changes_reach_real_traffic_through_three_versions(tmp_path: Path, server_database: str | None) -> None:
    with (
        run_upstream("one") as (port_one, seen_one),
        run_upstream("two") as (port_two, seen_two),
        run_server(tmp_path, server_database) as server,
        run_agent(tmp_path, "edge-1", server.grpc_address, {"region": "eu"}) as agent,
        run_envoy(tmp_path, "gw-1", agent.xds_port) as envoy,
        server.http() as api,
        blocking(server.client()) as north,
    ):
        envoy.wait_listener(agent.gateway_port)
        gateway = Gateway(agent.gateway_port)

        # Version 1: GET /orders/items reaches upstream one as /items; nothing undeclared is routed.
        north.put(orders_api(port_one))
        answer = gateway.wait_for("/orders/items", from_upstream("one"))
        assert answer.json()["path"] == "/items"
        assert gateway.request("GET", "/orders/items/42?expand=1").json()["path"] == "/items/42?expand=1"
        assert gateway.request("POST", "/orders/items").status_code == 404
        assert gateway.request("GET", "/orders/admin").status_code == 404
        assert gateway.request("GET", "/ordersx/items").status_code == 404

        # An API placed on another cluster never reaches this one.
        billing = orders_api(port_one)
        billing["metadata"]["name"] = "billing"
        billing["spec"]["basePath"] = "/billing"
        billing["spec"]["placement"] = {"clusters": ["edge-2"]}
        north.put(billing)

        # Version 2: the backend moves to upstream two, under /v2.
        north.put(orders_api(port_two, base_path="/v2"))
        answer = gateway.wait_for("/orders/items", from_upstream("two"))
        assert answer.json()["path"] == "/v2/items"

        # Version 3: POST /items is declared now; GET /items/{id} is not any more.
        ops = [{"method": "GET", "path": "/items"}, {"method": "POST", "path": "/items"}]
        north.put(orders_api(port_two, base_path="/v2", operations=ops))
        gateway.wait_for("/orders/items", from_upstream("two"), method="POST")
        assert gateway.request("GET", "/orders/items/42").status_code == 404

        assert gateway.request("GET", "/billing/items").status_code == 404
        assert "billing" not in json.dumps(envoy.config_dump())

        # Deleted: the gateway answers 404 again.
        assert api.delete("/v1/projects/default/apis/orders").status_code == 200
        gateway.wait_for("/orders/items", status(404))

        assert all(r["upstream"] == "one" for r in seen_one)
        assert seen_two, "upstream two saw no traffic"
        gateway.close()
