"""The ingress gateway as Istio runs it: istiod reads a Gateway and a VirtualService from the API server
and configures a real Envoy, which carries a plain HTTP request to the workload the route names."""

from __future__ import annotations

import ssl
from collections.abc import Iterator

import httpx
import pytest

from meshplane.security.ca import create_ca, issue_server_certificate
from meshplane_testing.eventually import eventually
from meshplane_testing.istio import (
    INGRESS,
    Fleet,
    Gateway,
    IstioCluster,
    ServicePort,
    Workload,
    http_route,
    start_gateway,
    tls_secret,
)
from meshplane_testing.upstream import run_upstream

pytestmark = pytest.mark.timeout(300)

HOST = "shop.example.com"
SECURE_HOST = "pay.example.com"


@pytest.fixture(scope="module")
def cluster(fleet: Fleet) -> IstioCluster:
    return fleet["cluster-a"]


@pytest.fixture(scope="module")
def ingress(cluster: IstioCluster) -> Iterator[Gateway]:
    with start_gateway(cluster, INGRESS) as gateway:
        yield gateway


def test_a_request_for_a_routed_host_reaches_the_workload_through_the_gateway(
    cluster: IstioCluster, ingress: Gateway
) -> None:
    web = Workload("web", "shop", cluster.new_address(), {"app": "web"}, (ServicePort("http", 80, 8080),))
    with run_upstream("web") as (upstream_port, seen), cluster.serve(web, {8080: upstream_port}):
        cluster.apply_all(http_route("shop-web", INGRESS, HOST, web))
        gateway_port = ingress.port(8080)

        def routed() -> httpx.Response | None:
            try:
                response = httpx.get(f"http://127.0.0.1:{gateway_port}/orders?id=7", headers={"Host": HOST}, timeout=5)
            except httpx.HTTPError:
                return None
            return response if response.status_code == 200 else None

        response = eventually(routed, timeout=60, what=f"{HOST} routed by the ingress gateway")
        assert response.json()["upstream"] == "web"
        assert seen[-1]["path"] == "/orders?id=7"
        assert seen[-1]["headers"]["host"] == HOST

        unknown = httpx.get(f"http://127.0.0.1:{gateway_port}/", headers={"Host": "other.example.com"}, timeout=5)
        assert unknown.status_code == 404


def test_https_with_the_gateways_credential_reaches_the_workload(cluster: IstioCluster, ingress: Gateway) -> None:
    ca = create_ca()
    served = issue_server_certificate(ca, [SECURE_HOST])
    web = Workload("secure-web", "shop", cluster.new_address(), {"app": "secure-web"}, (ServicePort("http", 80, 8080),))
    with run_upstream("secure-web") as (upstream_port, seen), cluster.serve(web, {8080: upstream_port}):
        cluster.apply(tls_secret("secure-shop-cert", served.certificate_pem(), served.key_pem()))
        cluster.apply_all(http_route("secure-shop", INGRESS, SECURE_HOST, web, credential="secure-shop-cert"))
        gateway_port = ingress.port(8443)
        trust = ssl.create_default_context(cadata=ca.certificate_pem().decode())

        def routed() -> httpx.Response | None:
            try:
                with httpx.Client(verify=trust, timeout=5) as client:
                    response = client.get(
                        f"https://127.0.0.1:{gateway_port}/pay",
                        headers={"Host": SECURE_HOST},
                        extensions={"sni_hostname": SECURE_HOST},
                    )
            except httpx.HTTPError:
                return None
            return response if response.status_code == 200 else None

        response = eventually(routed, timeout=60, what=f"{SECURE_HOST} served over TLS by the ingress gateway")
        assert response.json()["upstream"] == "secure-web"
        assert seen[-1]["headers"]["x-forwarded-proto"] == "https"
