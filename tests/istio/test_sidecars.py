"""Workloads with Istio's sidecar: traffic captured by istio-iptables in each pod's network namespace,
carried between sidecars over mutual TLS with certificates from istiod, and judged by the policies
istiod turns into Envoy configuration."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from meshplane_testing.eventually import eventually
from meshplane_testing.istio import Fleet, IstioCluster, Pod, ServicePort, Workload
from meshplane_testing.upstream import run_upstream

pytestmark = pytest.mark.timeout(300)

NAMESPACE = "sidecars"
WEB_HOST = f"web.{NAMESPACE}.svc.cluster.local"


@pytest.fixture(scope="module")
def cluster(fleet: Fleet) -> IstioCluster:
    return fleet["cluster-c"]


def _workload(cluster: IstioCluster, name: str, sidecar: bool = True) -> Workload:
    ports = (ServicePort("http", 80, 8080),)
    return Workload(name, NAMESPACE, cluster.new_address(), {"app": name}, ports, service_account=name, sidecar=sidecar)


@pytest.fixture(scope="module")
def pods(cluster: IstioCluster) -> Iterator[dict[str, Pod]]:
    with (
        run_upstream("web") as (upstream_port, _),
        cluster.serve(_workload(cluster, "web"), {8080: upstream_port}) as web,
        cluster.serve(_workload(cluster, "orders")) as orders,
        cluster.serve(_workload(cluster, "billing")) as billing,
        cluster.serve(_workload(cluster, "legacy", sidecar=False)) as legacy,
    ):
        yield {"web": web, "orders": orders, "billing": billing, "legacy": legacy}


def _cluster_ip(cluster: IstioCluster, name: str) -> str:
    with cluster.kube.client() as client:
        return client.get(f"/api/v1/namespaces/{NAMESPACE}/services/{name}").json()["spec"]["clusterIP"]


def _status_from(pod: Pod, address: str, port: int) -> int | None:
    try:
        return pod.request(address, port, "/", {"Host": WEB_HOST}).status
    except OSError:
        return None


def test_a_client_with_a_sidecar_reaches_a_service_over_mutual_tls(cluster: IstioCluster, pods: dict[str, Pod]) -> None:
    web_ip = _cluster_ip(cluster, "web")
    eventually(lambda: _status_from(pods["orders"], web_ip, 80) == 200, timeout=60, what="orders -> web")
    response = pods["orders"].request(web_ip, 80, "/", {"Host": WEB_HOST})
    client_certificate = response.body.decode()
    assert f"URI=spiffe://cluster.local/ns/{NAMESPACE}/sa/orders" in client_certificate
    assert f"By=spiffe://cluster.local/ns/{NAMESPACE}/sa/web" in client_certificate


def test_an_allow_policy_admits_the_declared_client_and_answers_403_to_another(
    cluster: IstioCluster, pods: dict[str, Pod]
) -> None:
    cluster.apply(
        {
            "apiVersion": "security.istio.io/v1",
            "kind": "AuthorizationPolicy",
            "metadata": {"name": "web-clients", "namespace": NAMESPACE},
            "spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "action": "ALLOW",
                "rules": [{"from": [{"source": {"principals": [f"cluster.local/ns/{NAMESPACE}/sa/orders"]}}]}],
            },
        }
    )
    web_ip = _cluster_ip(cluster, "web")
    try:
        eventually(lambda: _status_from(pods["billing"], web_ip, 80) == 403, timeout=60, what="billing refused")
        assert _status_from(pods["orders"], web_ip, 80) == 200
    finally:
        cluster.delete("AuthorizationPolicy", NAMESPACE, "web-clients")


def test_strict_mutual_tls_refuses_a_client_without_a_sidecar(cluster: IstioCluster, pods: dict[str, Pod]) -> None:
    web_pod_ip = pods["web"].workload.address
    eventually(lambda: _status_from(pods["legacy"], web_pod_ip, 8080) == 200, timeout=60, what="plaintext admitted")
    cluster.apply(
        {
            "apiVersion": "security.istio.io/v1",
            "kind": "PeerAuthentication",
            "metadata": {"name": "strict", "namespace": NAMESPACE},
            "spec": {"mtls": {"mode": "STRICT"}},
        }
    )
    try:
        eventually(lambda: _status_from(pods["legacy"], web_pod_ip, 8080) is None, timeout=60, what="plaintext refused")
        assert _status_from(pods["orders"], _cluster_ip(cluster, "web"), 80) == 200
    finally:
        cluster.delete("PeerAuthentication", NAMESPACE, "strict")
