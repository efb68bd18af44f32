"""Properties over generated API sets: determinism, consistent names, and route semantics."""

from __future__ import annotations

import ipaddress

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from meshplane.agent.translate import EnvoyConfig, GatewaySettings, translate_apis
from meshplane.model.resource import Resource
from meshplane_testing.route_table import (
    covering,
    declared,
    forwarded_path,
    probes,
    segments,
    select,
)
from meshplane_testing.translate_factories import LITERALS, LOOPBACK, api_sets

SETTINGS = GatewaySettings(backends=LOOPBACK)


def serialized(config: EnvoyConfig) -> list[list[bytes]]:
    groups = (config.listeners, config.routes, config.clusters, config.endpoints)
    return [[message.SerializeToString(deterministic=True) for message in group] for group in groups]


@given(st.data())
def test_output_does_not_depend_on_input_order(data: st.DataObject) -> None:
    apis = data.draw(api_sets())
    shuffled = data.draw(st.permutations(apis))
    assert serialized(translate_apis(shuffled, SETTINGS)) == serialized(translate_apis(apis, SETTINGS))


@given(api_sets())
def test_names_are_unique_and_every_reference_resolves(apis: list[Resource]) -> None:
    config = translate_apis(apis, SETTINGS)
    clusters = {cluster.name: cluster for cluster in config.clusters}
    assert len(clusters) == len(config.clusters)
    assert len({e.cluster_name for e in config.endpoints}) == len(config.endpoints)
    eds = {name for name, cluster in clusters.items() if cluster.HasField("eds_cluster_config")}
    assert {e.cluster_name for e in config.endpoints} == eds
    vhosts = config.routes[0].virtual_hosts
    assert len({v.name for v in vhosts}) == len(vhosts)
    domains = [domain for v in vhosts for domain in v.domains]
    assert len(set(domains)) == len(domains)
    assert set(domains) == {host for a in apis for host in a.spec.hostnames}
    referenced = set()
    for vhost in vhosts:
        for route in vhost.routes:
            action = route.route
            referenced |= {action.cluster} if action.cluster else {c.name for c in action.weighted_clusters.clusters}
    assert referenced == set(clusters)


# The model's semantics, written independently of the translator: segments are compared one by one.


def expected_forward(a: Resource, path: str) -> str:
    backend = next(b for b in a.spec.backends if b.weight > 0)
    tail = segments(path)[len(segments(a.spec.base_path)) :]
    return backend.base_path.rstrip("/") + "".join("/" + s for s in tail) or "/"


@settings(max_examples=300)
@given(st.data())
def test_routes_match_exactly_the_declared_operations(data: st.DataObject) -> None:
    """The first matching route is one covering the request, from the API with the longest basePath among
    those that declare it, and forwards the request with the basePath replaced; undeclared requests get none."""
    apis = data.draw(api_sets())
    table = translate_apis(apis, SETTINGS).routes[0]
    by_ident = {f"{a.metadata.project}/{a.metadata.name}": a for a in apis}
    for host, method, path in data.draw(probes(apis)):
        route = select(table, host, method, path)
        expected = declared(apis, host, method, path)
        if not expected:
            assert route is None, (host, method, path)
            continue
        assert route is not None, (host, method, path, expected)
        longest = max(len(segments(by_ident[ident].spec.base_path)) for ident, _ in expected)
        winners = {name for ident, name in expected if len(segments(by_ident[ident].spec.base_path)) == longest}
        assert route.name in winners, (host, method, path)
        owner = by_ident[route.name.split(" ", 1)[0]]
        assert forwarded_path(route, path + "?q=/x") == expected_forward(owner, path) + "?q=/x"


# Proxyless gRPC clients: their listeners and route tables, and what gRPC's xDS client requires of them.


@given(api_sets())
def test_every_listener_names_a_route_table_of_its_own(apis: list[Resource]) -> None:
    config = translate_apis(apis, SETTINGS)
    listeners = [listener.name for listener in config.listeners]
    tables = [table.name for table in config.routes]
    assert len(set(listeners)) == len(listeners) and len(set(tables)) == len(tables)
    named = [manager_of(listener).rds.route_config_name for listener in config.listeners]
    assert sorted(named) == sorted(tables)


def manager_of(listener: listener_pb2.Listener) -> hcm_pb2.HttpConnectionManager:
    """The HTTP connection manager of an API listener, or the one filter of the gateway's listener."""
    if listener.HasField("api_listener"):
        packed = listener.api_listener.api_listener
    else:
        packed = listener.filter_chains[0].filters[0].typed_config
    manager = hcm_pb2.HttpConnectionManager()
    assert packed.Unpack(manager)
    return manager


def proxyless_expected(a: Resource) -> bool:
    """A serving gRPC backend on an IP address, and nothing to rewrite (every backend shares one basePath)."""
    grpc_ips = [b for b in a.spec.backends if b.weight > 0 and b.protocol.value == "grpc" and is_ip(b.host)]
    return bool(grpc_ips) and grpc_ips[0].base_path == a.spec.base_path


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def assert_grpc_accepts(config: EnvoyConfig, listener: listener_pb2.Listener) -> route_pb2.RouteConfiguration:
    """What gRPC's xDS client requires of the resources a proxyless channel reads, as far as we emit them."""
    manager = manager_of(listener)
    assert not listener.HasField("address") and not listener.filter_chains
    assert manager.rds.config_source.HasField("ads")
    assert manager.http_filters[-1].name == "envoy.filters.http.router"
    table = next(t for t in config.routes if t.name == manager.rds.route_config_name)
    (vhost,) = table.virtual_hosts
    assert listener.name in vhost.domains
    clusters = {cluster.name: cluster for cluster in config.clusters}
    weights = {
        e.cluster_name: [locality.load_balancing_weight.value for locality in e.endpoints] for e in config.endpoints
    }
    for route in vhost.routes:
        kind = route.match.WhichOneof("path_specifier")
        assert kind in ("prefix", "path", "safe_regex"), kind
        assert kind != "prefix" or route.match.prefix.count("/") <= 2
        assert not route.match.headers
        action = route.route
        assert not action.HasField("regex_rewrite") and not action.prefix_rewrite and not action.HasField("timeout")
        names = [action.cluster] if action.cluster else [c.name for c in action.weighted_clusters.clusters]
        assert all(c.weight.value > 0 for c in action.weighted_clusters.clusters)
        for name in names:
            assert clusters[name].type == cluster_pb2.Cluster.EDS
            assert clusters[name].eds_cluster_config.eds_config.HasField("ads")
            assert weights[name] and all(weight >= 1 for weight in weights[name])
    return table


@st.composite
def grpc_paths(draw: st.DrawFn, a: Resource) -> list[str]:
    """What a gRPC client sends, `/service/method`: from the probes near the API's operations, and more
    under the first segment of its basePath."""
    near = [path for _, _, path in draw(probes([a]))]
    first = segments(a.spec.base_path)[:1]
    rest = st.lists(st.sampled_from([*LITERALS, "zz"]), min_size=2 - len(first), max_size=2 - len(first))
    more = ["/" + "/".join([*first, *tail]) for tail in draw(st.lists(rest, min_size=1, max_size=3))]
    return [path for path in [*near, *more] if len(segments(path)) == 2 and all(segments(path))]


@settings(max_examples=200)
@given(st.data())
def test_proxyless_clients_get_what_grpc_accepts_and_the_apis_routes(data: st.DataObject) -> None:
    """An API listener exactly for the APIs a gRPC client can reach faithfully; its routes take a POST to
    the same API operations the gateway would, with nothing gRPC would refuse or ignore."""
    apis = data.draw(api_sets())
    config = translate_apis(apis, SETTINGS)
    api_listeners = {listener.name: listener for listener in config.listeners if listener.HasField("api_listener")}
    by_target = {f"{a.metadata.name}.{a.metadata.project}": a for a in apis}
    assert set(api_listeners) == {target for target, a in by_target.items() if proxyless_expected(a)}
    for target, listener in api_listeners.items():
        table = assert_grpc_accepts(config, listener)
        owner = by_target[target]
        for path in data.draw(grpc_paths(owner)):
            route = select(table, target, "POST", path)
            expected = covering(owner, "POST", path)
            assert (route.name in expected) if route else not expected, (target, path, expected)
