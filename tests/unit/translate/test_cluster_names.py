"""An API backend's Envoy cluster is named after where it sends requests: a backend that moves becomes a new
cluster beside the old one (the gateways switch routes to it in one step), and what routes hold alone (a
backend's share, its path) leaves the cluster as it is."""

from __future__ import annotations

from meshplane.agent.translate.apis import Api
from meshplane.model.resource import Resource
from meshplane_testing.translate_factories import api, backend


def _cluster(resource: Resource) -> str:
    return Api.of(resource).cluster_name(0)


def test_a_backend_that_moves_gets_a_cluster_of_another_name() -> None:
    before = _cluster(api("orders", basePath="/orders", backends=[backend("10.0.0.1", 8080)]))
    assert _cluster(api("orders", basePath="/orders", backends=[backend("10.0.0.2", 8080)])) != before
    assert _cluster(api("orders", basePath="/orders", backends=[backend("10.0.0.1", 8081)])) != before
    assert _cluster(api("orders", basePath="/orders", backends=[backend("10.0.0.1", 8080, protocol="http2")])) != before


def test_what_the_routes_hold_leaves_the_cluster_name_alone() -> None:
    before = _cluster(api("orders", basePath="/orders", backends=[backend("10.0.0.1", 8080)]))
    moved_path = {**backend("10.0.0.1", 8080), "basePath": "/v2"}
    assert _cluster(api("orders", basePath="/orders", backends=[moved_path])) == before
    assert _cluster(api("orders", basePath="/orders", backends=[backend("10.0.0.1", 8080, weight=7)])) == before
    assert before.startswith("api.shop.orders.0.")
