"""Make-before-break: while routes move between Envoy clusters, no request meets a missing cluster."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx

from meshplane_testing.envoy import run_envoy
from meshplane_testing.gateway import Gateway, from_upstream
from meshplane_testing.meshplane import run_agent, run_server
from meshplane_testing.upstream import run_upstream


def api(backends: list[dict]) -> dict:
    return {
        "kind": "API",
        "metadata": {"name": "orders", "project": "default"},
        "spec": {"basePath": "/orders", "backends": backends},
    }


def test_moving_routes_between_clusters_drops_no_request(tmp_path: Path) -> None:
    with (
        run_upstream("one") as (port_one, _),
        run_upstream("two") as (port_two, _),
        run_server(tmp_path) as server,
        run_agent(tmp_path, "edge-1", server.grpc_address) as agent,
        run_envoy(tmp_path, "gw-1", agent.xds_port) as envoy,
        server.http() as rest,
    ):
        envoy.wait_listener(agent.gateway_port)
        gateway = Gateway(agent.gateway_port)
        one_only = [{"host": "127.0.0.1", "port": port_one}]
        # Backend one at weight 0 has no Envoy cluster, so the route moves to cluster index 1 and back.
        two_only = [{"host": "127.0.0.1", "port": port_one, "weight": 0}, {"host": "127.0.0.1", "port": port_two}]
        rest.put("/v1/projects/default/apis/orders", json=api(one_only)).raise_for_status()
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
                backends, upstream = (two_only, "two") if round_ % 2 == 0 else (one_only, "one")
                rest.put("/v1/projects/default/apis/orders", json=api(backends)).raise_for_status()
                gateway.wait_for("/orders/x", from_upstream(upstream))
                time.sleep(0.1)
        finally:
            stop.set()
            caller.join(timeout=10)
        gateway.close()

    assert len(statuses) > 30, "too little traffic to say anything"
    assert set(statuses) == {200}, {code: statuses.count(code) for code in set(statuses)}


def test_a_backend_and_its_path_change_together_for_every_request(tmp_path: Path) -> None:
    """Moving an API to another upstream under another path changes its cluster and its route: no request may
    reach the new upstream on the old path (or the old upstream on the new one) while they change."""
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
        versions = {
            "one": [{"host": "127.0.0.1", "port": port_one, "basePath": "/v1"}],
            "two": [{"host": "127.0.0.1", "port": port_two, "basePath": "/v2"}],
        }
        rest.put("/v1/projects/default/apis/orders", json=api(versions["one"])).raise_for_status()
        gateway.wait_for("/orders/x", from_upstream("one"))

        stop = threading.Event()

        def traffic() -> None:
            with httpx.Client(base_url=f"http://127.0.0.1:{agent.gateway_port}", timeout=5) as client:
                while not stop.is_set():
                    client.get("/orders/x")

        caller = threading.Thread(target=traffic)
        caller.start()
        try:
            for round_ in range(10):
                upstream = "two" if round_ % 2 == 0 else "one"
                rest.put("/v1/projects/default/apis/orders", json=api(versions[upstream])).raise_for_status()
                gateway.wait_for("/orders/x", from_upstream(upstream))
                time.sleep(0.1)
        finally:
            stop.set()
            caller.join(timeout=10)
        gateway.close()

    assert len(seen_one) + len(seen_two) > 30, "too little traffic to say anything"
    assert {request["path"] for request in seen_one} == {"/v1/x"}
    assert {request["path"] for request in seen_two} == {"/v2/x"}
