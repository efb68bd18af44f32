"""The order of a virtual host's routes is the specification's precedence, whatever order the input has."""

from __future__ import annotations

from typing import Any

from meshplane.gatewayapi.program import program
from meshplane_testing.gatewayapi_objects import backend, gateway, listener, route, rule, service, state

ROUTES = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"


def ordered(*routes: dict[str, Any]) -> list[str]:
    given = state(
        gateway("gw", listener("http", 80)), *routes, services={("default", "svc"): service(("127.0.0.2", 9000))}
    )
    (table,) = program(given).resources[ROUTES].values()
    (host,) = table.virtual_hosts
    return [entry.name for entry in host.routes]


def path(kind: str, value: str, **extra: Any) -> dict[str, Any]:
    return {"path": {"type": kind, "value": value}, **extra}


def test_exact_beats_longest_prefix_beats_method_beats_headers_beats_query_params() -> None:
    matches = [
        path("PathPrefix", "/"),
        path("PathPrefix", "/a", queryParams=[{"name": "q", "value": "1"}]),
        path("PathPrefix", "/a", headers=[{"name": "x", "value": "1"}]),
        path("PathPrefix", "/a", method="GET"),
        path("PathPrefix", "/a/b"),
        path("Exact", "/a"),
        path("PathPrefix", "/a", headers=[{"name": "x", "value": "1"}, {"name": "y", "value": "2"}]),
    ]
    names = ordered(route("r", rule(backend("svc"), matches=matches)))
    assert [int(name.rsplit("/", 1)[1]) for name in names] == [5, 4, 3, 6, 2, 1, 0]


def test_ties_go_to_the_oldest_route_then_by_namespace_and_name_then_rule_order() -> None:
    same = [path("PathPrefix", "/x")]
    names = ordered(
        route("young", rule(backend("svc"), matches=same), created="2026-03-01T00:00:00Z"),
        route("b-old", rule(backend("svc"), matches=same), rule(backend("svc"), matches=same)),
        route("a-old", rule(backend("svc"), matches=same)),
    )
    assert names == [
        "default/a-old/0/0",
        "default/b-old/0/0",
        "default/b-old/1/0",
        "default/young/0/0",
    ]


def test_grpc_matches_prefer_the_longest_service_then_method_then_most_headers() -> None:
    matches = [
        {"method": {"service": "shop.Orders"}},
        {"method": {"method": "Get"}},
        {"method": {"service": "shop.Orders", "method": "Get"}},
        {"method": {"service": "shop.Orders", "method": "Get"}, "headers": [{"name": "x-tier", "value": "gold"}]},
        {},
    ]
    names = ordered(route("g", rule(backend("svc"), matches=matches), kind="GRPCRoute"))
    assert [int(name.rsplit("/", 1)[1]) for name in names] == [3, 2, 0, 1, 4]


def test_rules_of_the_route_with_the_more_specific_hostname_come_first() -> None:
    given = state(
        gateway("gw", listener("http", 80)),
        route("wild", rule(backend("svc"), matches=[path("Exact", "/x")]), hostnames=["*.example.com"]),
        route("exact", rule(backend("svc")), hostnames=["foo.example.com"], created="2026-09-01T00:00:00Z"),
        services={("default", "svc"): service(("127.0.0.2", 9000))},
    )
    (table,) = program(given).resources[ROUTES].values()
    hosts = {host.name: [entry.name for entry in host.routes] for host in table.virtual_hosts}
    assert hosts["foo.example.com"] == ["default/exact/0/0", "default/wild/0/0"]
    assert hosts["*.example.com"] == ["default/wild/0/0"]
