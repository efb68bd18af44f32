"""Make-before-break: while routes move between Envoy clusters, no request meets a missing cluster."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from meshplane_testing import documents
from meshplane_testing.envoy import run_envoy
from meshplane_testing.gateway import Gateway, from_upstream
from meshplane_testing.meshplane import run_agent, run_server
from meshplane_testing.upstream import run_upstream


def alternate(
    tmp_path: Path, versions: Callable[[int, int], dict[str, list[dict]]]
) -> tuple[list[int], list[dict[str, Any]], list[dict[str, Any]]]:
    """Status codes of steady traffic through a real Envoy while an API alternates ten times between the two
    backend lists `versions(port_one, port_two)` gives under "one" and "two" (starting on "one"), each change
    awaited at the gateway; and the requests each upstream saw."""
    with (
        run_upstream("one") as (port_one, seen_one),
        run_upstream("two") as (port_two, seen_two),
        run_server(tmp_path) as server,
        run_agent(tmp_path, "edge-1", server.grpc_address) as agent,
        run_envoy(tmp_path, "gw-1", agent.xds_port) as envoy,
        server.http() as rest,
    ):
        envoy.wait_listener(agent.gateway_port)
        gateway = Gateway(agent.gateway_port)
        backends = versions(port_one, port_two)
        rest.put(
            "/v1/projects/default/apis/orders", json=documents.api("orders", backends=backends["one"])
        ).raise_for_status()
        gateway.wait_for("/orders/x", from_upstream("one"))

        statuses: list[int] = []
        stop = threading.Event()

        def traffic() -> None:
            with httpx.Client(base_url=f"http://127.0.0.1:{agent.gateway_port}", timeout=5) as client:
                while not stop.is_set():
                    statuses.append(client.get("/orders/x").status_code)

        caller = threading.Thread(target=traffic)
        caller.start()
        try:
            for round_ in range(10):
                upstream = "two" if round_ % 2 == 0 else "one"
                rest.put(
                    "/v1/projects/default/apis/orders", json=documents.api("orders", backends=backends[upstream])
                ).raise_for_status()
                gateway.wait_for("/orders/x", from_upstream(upstream))
                time.sleep(0.1)
        finally:
            stop.set()
            caller.join(timeout=10)
        gateway.close()
    return statuses, seen_one, seen_two


def test_moving_routes_between_clusters_drops_no_request(tmp_path: Path) -> None:
    # Backend one at weight 0 has no Envoy cluster, so the route moves to cluster index 1 and back.
    statuses, _, _ = alternate(
        tmp_path,
        lambda one, two: {
            "one": [{"host": "127.0.0.1", "port": one}],
            "two": [{"host": "127.0.0.1", "port": one, "weight": 0}, {"host": "127.0.0.1", "port": two}],
        },
    )
    assert len(statuses) > 30, "too little traffic to say anything"
    assert set(statuses) == {200}, {code: statuses.count(code) for code in set(statuses)}


def test_a_backend_and_its_path_change_together_for_every_request(tmp_path: Path) -> None:
    """Moving an API to another upstream under another path changes its cluster and its route: no request may
    reach the new upstream on the old path (or the old upstream on the new one) while they change."""
    statuses, seen_one, seen_two = alternate(
        tmp_path,
        lambda one, two: {
            "one": [{"host": "127.0.0.1", "port": one, "basePath": "/v1"}],
            "two": [{"host": "127.0.0.1", "port": two, "basePath": "/v2"}],
        },
    )
    assert len(statuses) > 30, "too little traffic to say anything"
    assert {request["path"] for request in seen_one} == {"/v1/x"}
    assert {request["path"] for request in seen_two} == {"/v2/x"}
