"""Gateways of one cluster bind the same stock target ports side by side (each in its own network
namespace), and each carries only the servers of the Gateways that select it."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from meshplane_testing.eventually import eventually
from meshplane_testing.istio import (
    EGRESS,
    INGRESS,
    Fleet,
    Gateway,
    IstioCluster,
    ServicePort,
    Workload,
    http_route,
    start_gateway,
)
from meshplane_testing.upstream import run_upstream

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def cluster(fleet: Fleet) -> IstioCluster:
    return fleet["cluster-b"]


@pytest.fixture(scope="module")
def gateways(cluster: IstioCluster) -> Iterator[dict[str, Gateway]]:
    with start_gateway(cluster, INGRESS) as ingress, start_gateway(cluster, EGRESS) as egress:
        yield {"ingress": ingress, "egress": egress}


def _status(port: int, host: str) -> int | None:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/", headers={"Host": host}, timeout=5).status_code
    except httpx.HTTPError:
        return None


def test_the_ingress_and_the_egress_gateway_each_serve_their_own_hosts_on_8080(
    cluster: IstioCluster, gateways: dict[str, Gateway]
) -> None:
    echo = Workload("echo", "side-by-side", cluster.new_address(), {"app": "echo"}, (ServicePort("http", 80, 8080),))
    with run_upstream("echo") as (upstream_port, _), cluster.serve(echo, {8080: upstream_port}):
        cluster.apply_all(http_route("inbound", INGRESS, "inbound.example.com", echo))
        cluster.apply_all(http_route("outbound", EGRESS, "outbound.example.com", echo))
        ingress, egress = gateways["ingress"].port(8080), gateways["egress"].port(8080)

        eventually(lambda: _status(ingress, "inbound.example.com") == 200, timeout=60, what="ingress route")
        eventually(lambda: _status(egress, "outbound.example.com") == 200, timeout=60, what="egress route")
        assert _status(ingress, "outbound.example.com") == 404
        assert _status(egress, "inbound.example.com") == 404
