"""Hostname intersection and the listener a host picks."""

from __future__ import annotations

import pytest

from meshplane.gatewayapi.hostnames import intersection, matches
from meshplane.gatewayapi.program import program
from meshplane_testing.gatewayapi_objects import backend, gateway, listener, route, rule, service, state

ROUTES = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"


@pytest.mark.parametrize(
    ("pattern", "host", "expected"),
    [
        ("*.example.com", "foo.example.com", True),
        ("*.example.com", "a.b.example.com", True),
        ("*.example.com", "example.com", False),
        ("*.example.com", "*.foo.example.com", True),
        ("foo.example.com", "*.example.com", False),
        ("*", "anything.at.all", True),
    ],
)
def test_a_wildcard_matches_one_or_more_labels(pattern: str, host: str, expected: bool) -> None:
    assert matches(pattern, host) is expected


@pytest.mark.parametrize(
    ("listener_hostname", "route_hostnames", "shared"),
    [
        (None, [], ["*"]),
        (None, ["b.com", "a.com"], ["a.com", "b.com"]),
        ("*.example.com", [], ["*.example.com"]),
        ("*.example.com", ["foo.example.com", "other.org"], ["foo.example.com"]),
        ("foo.example.com", ["*.example.com"], ["foo.example.com"]),
        ("foo.example.com", ["bar.example.com"], []),
    ],
)
def test_a_route_serves_the_hostnames_it_shares_with_the_listener(
    listener_hostname: str | None, route_hostnames: list[str], shared: list[str]
) -> None:
    assert intersection(listener_hostname, route_hostnames) == shared


def test_a_host_picks_the_most_specific_listener_and_only_its_routes() -> None:
    given = state(
        gateway("gw", listener("wild", 80, hostname="*.example.com"), listener("exact", 80, hostname="a.example.com")),
        route("broad", rule(backend("svc")), parents=[{"name": "gw", "sectionName": "wild"}]),
        services={("default", "svc"): service(("127.0.0.2", 9000))},
    )
    (table,) = program(given).resources[ROUTES].values()
    hosts = {host.name: [r.name for r in host.routes] for host in table.virtual_hosts}
    assert hosts == {"a.example.com": [], "*.example.com": ["default/broad/0/0"]}


def test_a_route_attaches_to_a_listener_by_section_name_and_port() -> None:
    given = state(
        gateway("gw", listener("a", 80), listener("b", 81)),
        route("r", rule(), parents=[{"name": "gw", "port": 81}]),
    )
    counts = [entry["attachedRoutes"] for entry in program(given).statuses[("Gateway", "default", "gw")]["listeners"]]
    assert counts == [0, 1]


def test_a_mirror_fraction_becomes_the_share_of_requests_copied() -> None:
    mirror = {
        "type": "RequestMirror",
        "requestMirror": {"backendRef": backend("svc"), "fraction": {"numerator": 1, "denominator": 3}},
    }
    given = state(
        gateway("gw", listener("http", 80)),
        route("r", rule(backend("svc"), filters=[mirror])),
        services={("default", "svc"): service(("127.0.0.2", 9000))},
    )
    (table,) = program(given).resources[ROUTES].values()
    (policy,) = table.virtual_hosts[0].routes[0].route.request_mirror_policies
    assert (policy.runtime_fraction.default_value.numerator, policy.runtime_fraction.default_value.denominator) == (
        333_333,
        2,
    )
