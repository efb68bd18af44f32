"""A client in one cluster reaches a service in another through that cluster's east-west gateway: the
client's sidecar opens mTLS with its cluster's certificate, the gateway passes it through by SNI, and the
server's sidecar, certified by the other istiod, accepts it because both chain to the one root."""

from __future__ import annotations

import pytest

from meshplane_testing.eventually import eventually
from meshplane_testing.istio import (
    EAST_WEST,
    Fleet,
    Pod,
    ServicePort,
    Workload,
    cross_network_gateway,
    start_gateway,
)
from meshplane_testing.upstream import run_upstream

pytestmark = pytest.mark.timeout(300)

NAMESPACE = "east-west"
HOST = f"web.{NAMESPACE}.svc.cluster.local"
REMOTE_ADDRESS = "10.96.250.1"
"""The address cluster-a's clients call the remote service at (in the service range, so pods route it)."""


def _status(client: Pod) -> int | None:
    try:
        return client.request(REMOTE_ADDRESS, 80, "/", {"Host": HOST}).status
    except OSError:
        return None


def test_a_client_reaches_a_service_of_another_cluster_through_its_east_west_gateway(fleet: Fleet) -> None:
    local, remote = fleet["cluster-a"], fleet["cluster-b"]
    ports = (ServicePort("http", 80, 8080),)
    web = Workload("web", NAMESPACE, remote.new_address(), {"app": "web"}, ports, service_account="web", sidecar=True)
    client = Workload(
        "client", NAMESPACE, local.new_address(), {"app": "client"}, ports, service_account="client", sidecar=True
    )
    with (
        start_gateway(remote, EAST_WEST) as east_west,
        run_upstream("web") as (upstream_port, _),
        remote.serve(web, {8080: upstream_port}),
        local.serve(client) as client_pod,
    ):
        remote.apply(cross_network_gateway())
        local.apply(
            {
                "apiVersion": "networking.istio.io/v1",
                "kind": "ServiceEntry",
                "metadata": {"name": "web-remote", "namespace": NAMESPACE},
                "spec": {
                    "hosts": [HOST],
                    "addresses": [REMOTE_ADDRESS],
                    "location": "MESH_INTERNAL",
                    "resolution": "STATIC",
                    "ports": [{"number": 80, "name": "http", "protocol": "HTTP"}],
                    "endpoints": [
                        {
                            "address": east_west.workload.address,
                            "ports": {"http": 15443},
                            "labels": {"security.istio.io/tlsMode": "istio"},
                        }
                    ],
                },
            }
        )
        eventually(lambda: _status(client_pod) == 200, timeout=60, what="client in cluster-a -> web in cluster-b")
        identities = client_pod.request(REMOTE_ADDRESS, 80, "/", {"Host": HOST}).body.decode()
        assert f"URI=spiffe://cluster.local/ns/{NAMESPACE}/sa/client" in identities
        assert f"By=spiffe://cluster.local/ns/{NAMESPACE}/sa/web" in identities
