"""Backends that name a Kubernetes Service: the Envoy cluster each becomes, and the 503 when a cluster lacks it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from envoy.config.cluster.v3 import cluster_pb2

from meshplane.agent.translate import EnvoyConfig, GatewaySettings, translate_apis
from meshplane.agent.translate.service_backends import LocalServices
from meshplane.model.services import ServiceEndpointSpec
from meshplane_testing.envoy import envoy_binary, unversioned, validate
from meshplane_testing.static_bootstrap import static_bootstrap
from meshplane_testing.translate_factories import LOOPBACK, api, backend

SETTINGS = GatewaySettings(backends=LOOPBACK)
CLUSTER = "api.shop.orders.0"


def service(name: str, namespace: str, ports: list[dict[str, Any]], cluster_ips: list[str]) -> LocalServices:
    spec = ServiceEndpointSpec.model_validate(
        {"cluster": "edge-1", "namespace": namespace, "service": name, "ports": ports, "clusterIPs": cluster_ips}
    )
    return {(namespace, name): spec}


ORDERS = service("orders", "shop", [{"name": "http", "port": 8080, "targetPort": 9000}], ["10.96.0.10"])
HEADLESS = service("orders", "shop", [{"name": "http", "port": 8080, "targetPort": 9000}], [])


def orders_api(*backends: dict[str, Any]) -> Any:
    return api("orders", basePath="/orders", backends=list(backends) or [{"service": "orders.shop", "port": 8080}])


def translate(
    services: LocalServices | None, *backends: dict[str, Any], settings: GatewaySettings = SETTINGS
) -> EnvoyConfig:
    return translate_apis([orders_api(*backends)], settings, services=services)


def only_route(config: EnvoyConfig) -> Any:
    [host] = config.routes[0].virtual_hosts
    [route] = host.routes
    return route


def endpoint_of(config: EnvoyConfig, name: str = CLUSTER) -> tuple[str, int]:
    [assignment] = [a for a in config.endpoints if unversioned(a.cluster_name) == name]
    address = assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address
    return address.address, address.port_value


def test_a_service_with_a_cluster_ip_is_an_eds_cluster_at_that_ip_and_the_service_port() -> None:
    config = translate(ORDERS)
    [cluster] = config.clusters
    assert (unversioned(cluster.name), cluster.type) == (CLUSTER, cluster_pb2.Cluster.EDS)
    assert endpoint_of(config) == ("10.96.0.10", 8080)
    assert unversioned(only_route(config).route.cluster) == CLUSTER


@pytest.mark.parametrize(
    ("settings", "domain"),
    [(SETTINGS, "cluster.local"), (GatewaySettings(backends=LOOPBACK, cluster_domain="corp"), "corp")],
)
def test_without_the_clusters_services_the_cluster_dns_name_is_resolved_by_envoy(
    settings: GatewaySettings, domain: str
) -> None:
    config = translate(None, settings=settings)
    [cluster] = config.clusters
    assert cluster.type == cluster_pb2.Cluster.STRICT_DNS
    address = cluster.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address
    assert (address.address, address.port_value) == (f"orders.shop.svc.{domain}", 8080)
    assert config.endpoints == []


def test_a_headless_service_is_its_dns_name_at_the_pods_target_port() -> None:
    [cluster] = translate(HEADLESS).clusters
    address = cluster.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address
    assert (cluster.type, address.address, address.port_value) == (
        cluster_pb2.Cluster.STRICT_DNS,
        "orders.shop.svc.cluster.local",
        9000,
    )


@pytest.mark.parametrize(
    ("services", "port", "why"),
    [
        ({}, 8080, "service orders.shop is not in this cluster"),
        (ORDERS, 9999, "service orders.shop has no port 9999"),
    ],
)
def test_a_service_the_cluster_lacks_answers_503_saying_why(services: LocalServices, port: int, why: str) -> None:
    config = translate(services, {"service": "orders.shop", "port": port})
    assert config.clusters == [] and config.endpoints == []
    route = only_route(config)
    assert not route.HasField("route")
    assert (route.direct_response.status, route.direct_response.body.inline_string) == (503, why + "\n")


def test_a_missing_service_leaves_its_share_to_the_backends_that_are_there() -> None:
    config = translate(
        ORDERS,
        {"service": "orders.shop", "port": 8080, "weight": 30},
        {"service": "payments.shop", "port": 8080, "weight": 70},
        backend("10.0.0.5", 9001, weight=0),
    )
    assert [unversioned(cluster.name) for cluster in config.clusters] == [CLUSTER]
    assert unversioned(only_route(config).route.cluster) == CLUSTER


def test_host_and_service_backends_split_traffic_together() -> None:
    config = translate(
        ORDERS, {"service": "orders.shop", "port": 8080, "weight": 50}, backend("10.0.0.5", 9001, weight=50)
    )
    weights = {unversioned(c.name): c.weight.value for c in only_route(config).route.weighted_clusters.clusters}
    assert weights == {CLUSTER: 50, "api.shop.orders.1": 50}
    assert endpoint_of(config, "api.shop.orders.1") == ("10.0.0.5", 9001)


@pytest.mark.envoy
@pytest.mark.parametrize("services", [ORDERS, HEADLESS, {}, None], ids=["cluster-ip", "headless", "missing", "dns"])
def test_envoy_accepts_every_resolution(tmp_path: Path, services: LocalServices | None) -> None:
    envoy_binary()
    accepted, output = validate(tmp_path, static_bootstrap(translate(services)))
    assert accepted, output
