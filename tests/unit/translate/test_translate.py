"""Shapes of the translated resources, case by case."""

from __future__ import annotations

import pytest
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import config_source_pb2
from envoy.config.route.v3 import route_pb2
from envoy.extensions.filters.http.router.v3 import router_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2

from meshplane.agent.translate import EnvoyConfig, GatewaySettings, translate_apis
from meshplane.model.resource import Resource
from meshplane_testing.envoy import unversioned
from meshplane_testing.route_table import forwarded_path, select
from meshplane_testing.translate_factories import LOOPBACK, api, backend, example_api

SETTINGS = GatewaySettings(backends=LOOPBACK)


def translate(*apis: Resource) -> EnvoyConfig:
    return translate_apis(apis, SETTINGS)


def routes_of(config: EnvoyConfig, host: str = "any.host") -> list[str]:
    vhost = next(v for v in config.routes[0].virtual_hosts if "*" in v.domains or host in v.domains)
    return [route.name for route in vhost.routes]


def protocol_options(cluster: cluster_pb2.Cluster) -> http_protocol_options_pb2.HttpProtocolOptions:
    options = http_protocol_options_pb2.HttpProtocolOptions()
    cluster.typed_extension_protocol_options["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].Unpack(options)
    return options


def test_example_api() -> None:
    config = translate(example_api())

    (listener,) = config.listeners
    assert listener.name == "gateway"
    assert (listener.address.socket_address.address, listener.address.socket_address.port_value) == (
        "127.0.0.1",
        10000,
    )
    (network_filter,) = listener.filter_chains[0].filters
    manager = hcm_pb2.HttpConnectionManager()
    assert network_filter.typed_config.Unpack(manager)
    assert manager.stat_prefix == "gateway"
    assert manager.codec_type == hcm_pb2.HttpConnectionManager.AUTO
    assert manager.rds.route_config_name == "gateway"
    assert manager.rds.config_source.HasField("ads")
    assert manager.rds.config_source.resource_api_version == config_source_pb2.ApiVersion.V3
    router = manager.http_filters[-1]
    assert manager.http_filters[0].name == "envoy.filters.http.header_mutation"
    assert router.name == "envoy.filters.http.router"
    assert router.typed_config.Is(router_pb2.Router.DESCRIPTOR)

    (table,) = config.routes
    assert table.name == "gateway"
    (vhost,) = table.virtual_hosts
    assert list(vhost.domains) == ["*"]
    assert [r.name for r in vhost.routes] == ["shop/orders GET /items", "shop/orders POST /items"]
    for route, method in zip(vhost.routes, ["GET", "POST"], strict=True):
        assert route.match.path == "/orders/items"
        assert [(h.name, h.string_match.exact) for h in route.match.headers] == [(":method", method)]
        assert unversioned(route.route.cluster) == "api.shop.orders.0"
        assert route.route.timeout.ToSeconds() == 15
        assert forwarded_path(route, "/orders/items?page=2") == "/items?page=2"

    (cluster,) = config.clusters
    assert unversioned(cluster.name) == "api.shop.orders.0"
    assert cluster.type == cluster_pb2.Cluster.EDS
    assert cluster.eds_cluster_config.eds_config.HasField("ads")
    assert cluster.connect_timeout.ToSeconds() == 5
    assert protocol_options(cluster).explicit_http_config.HasField("http_protocol_options")

    (assignment,) = config.endpoints
    assert unversioned(assignment.cluster_name) == "api.shop.orders.0"
    address = assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address
    assert (address.address, address.port_value) == ("127.0.0.1", 9001)


def test_example_api_answers_only_declared_operations() -> None:
    table = translate(example_api()).routes[0]
    assert select(table, "x", "GET", "/orders/items") is not None
    assert select(table, "x", "POST", "/orders/items?x=1") is not None
    assert select(table, "x", "DELETE", "/orders/items") is None
    assert select(table, "x", "GET", "/orders/items/1") is None
    assert select(table, "x", "GET", "/orders") is None
    assert select(table, "x", "GET", "/items") is None


def test_no_apis_still_has_a_listener_and_an_empty_route_table() -> None:
    config = translate()
    assert [listener.name for listener in config.listeners] == ["gateway"]
    assert [(table.name, len(table.virtual_hosts)) for table in config.routes] == [("gateway", 0)]
    assert (config.clusters, config.endpoints) == ([], [])


def test_settings_name_and_place_the_listener() -> None:
    settings = GatewaySettings(
        backends=LOOPBACK, listener_address="0.0.0.0", listener_port=8080, listener_name="edge", route_config_name="rt"
    )
    config = translate_apis([], settings)
    (listener,) = config.listeners
    manager = hcm_pb2.HttpConnectionManager()
    listener.filter_chains[0].filters[0].typed_config.Unpack(manager)
    assert (listener.name, listener.address.socket_address.port_value, manager.rds.route_config_name) == (
        "edge",
        8080,
        "rt",
    )
    assert config.routes[0].name == "rt"


@pytest.mark.parametrize(
    ("base_path", "path", "matched"),
    [
        ("/orders", "/orders", True),
        ("/orders", "/orders/", True),
        ("/orders", "/orders/a/b?c=d", True),
        ("/orders", "/ordersx", False),
        ("/orders", "/order", False),
        ("/orders", "/", False),
        ("/", "/", True),
        ("/", "/anything/at/all", True),
        ("/t/{tenant}", "/t/acme/x", True),
        ("/t/{tenant}", "/t/acme", True),
        ("/t/{tenant}", "/t", False),
        ("/t/{tenant}", "/t/acme-x", True),
    ],
)
def test_api_without_operations_matches_everything_under_its_base_path(
    base_path: str, path: str, matched: bool
) -> None:
    table = translate(api("legacy", basePath=base_path, backends=[backend()])).routes[0]
    route = select(table, "host", "DELETE", path)
    assert (route is not None) == matched


def test_literal_catch_all_uses_path_separated_prefix() -> None:
    (route,) = translate(api("legacy", basePath="/orders", backends=[backend()])).routes[0].virtual_hosts[0].routes
    assert route.match.path_separated_prefix == "/orders"
    assert not route.match.headers
    (root,) = translate(api("root", basePath="/", backends=[backend()])).routes[0].virtual_hosts[0].routes
    assert root.match.prefix == "/"


@pytest.mark.parametrize(
    ("api_base", "backend_base", "path", "forwarded"),
    [
        ("/orders", "/", "/orders/items", "/items"),
        ("/orders", "/v2", "/orders/items", "/v2/items"),
        ("/orders", "/", "/orders", "/"),
        ("/orders", "/v2", "/orders", "/v2"),
        ("/orders", "/", "/orders/", "/"),
        ("/orders", "/v2", "/orders/", "/v2/"),
        ("/orders", "/v2/api", "/orders/a/b?q=1&r=/orders", "/v2/api/a/b?q=1&r=/orders"),
        ("/orders", "/orders", "/orders/items?x", "/orders/items?x"),
        ("/orders/v1", "/", "/orders/v1/orders/v1", "/orders/v1"),
        ("/", "/", "/items?x=1", "/items?x=1"),
        ("/", "/v2", "/", "/v2"),
        ("/", "/v2", "/items?x=1", "/v2/items?x=1"),
        ("/", "/v2", "/items/", "/v2/items/"),
        ("/t/{tenant}", "/", "/t/acme/x?y", "/x?y"),
        ("/t/{tenant}", "/v2", "/t/acme", "/v2"),
    ],
)
def test_backend_base_path_replaces_the_api_base_path(
    api_base: str, backend_base: str, path: str, forwarded: str
) -> None:
    table = translate(api("a", basePath=api_base, backends=[backend(basePath=backend_base)])).routes[0]
    route = select(table, "h", "GET", path)
    assert route is not None
    assert forwarded_path(route, path) == forwarded


def test_no_rewrite_when_base_paths_agree() -> None:
    for base in ("/", "/orders"):
        config = translate(api("a", basePath=base, backends=[backend(basePath=base)]))
        assert not config.routes[0].virtual_hosts[0].routes[0].route.HasField("regex_rewrite")


@pytest.mark.parametrize(
    ("method", "path", "route_name"),
    [
        ("GET", "/orders/items", "shop/a GET /items"),
        ("GET", "/orders/items/42", "shop/a GET /items/{id}"),
        ("GET", "/orders/items/special", "shop/a GET /items/special"),
        ("GET", "/orders/items/42/lines", "shop/a GET /items/*"),
        ("GET", "/orders/items/", "shop/a GET /items/*"),
        ("PUT", "/orders/items/42", "shop/a PUT /items/{id}"),
        ("PUT", "/orders/items/42/x", None),
        ("PUT", "/orders/items/", None),
        ("PUT", "/orders/items", None),
        ("GET", "/orders/files", "shop/a GET /files/*"),
        ("GET", "/orders/files/a/b.txt", "shop/a GET /files/*"),
        ("GET", "/orders/filesx", None),
        ("HEAD", "/orders/files", None),
        ("GET", "/orders", "shop/a GET /"),
        ("GET", "/orders/", None),
        ("GET", "/orders/x-y/a+b", "shop/a GET /x-y/a+b"),
        ("GET", "/orders/x-y/aab", None),
    ],
)
def test_operations_match_their_pattern_and_method_only(method: str, path: str, route_name: str | None) -> None:
    ops = [
        ("GET", "/items/*"),
        ("GET", "/items/{id}"),
        ("PUT", "/items/{id}"),
        ("GET", "/items/special"),
        ("GET", "/items"),
        ("GET", "/files/*"),
        ("GET", "/"),
        ("GET", "/x-y/a+b"),
    ]
    operations = [{"method": m, "path": p} for m, p in ops]
    table = translate(api("a", basePath="/orders", operations=operations, backends=[backend()])).routes[0]
    route = select(table, "h", method, path)
    assert (route.name if route else None) == route_name


def test_routes_most_specific_first() -> None:
    config = translate(
        api("root", basePath="/", backends=[backend()]),
        api("orders", basePath="/orders", backends=[backend()]),
        api(
            "admin",
            basePath="/orders/admin",
            operations=[
                {"method": "GET", "path": "/*"},
                {"method": "GET", "path": "/{id}"},
                {"method": "GET", "path": "/users/{id}"},
                {"method": "DELETE", "path": "/users/{id}"},
                {"method": "GET", "path": "/users/me"},
                {"method": "GET", "path": "/"},
            ],
            backends=[backend()],
        ),
    )
    assert routes_of(config) == [
        "shop/admin GET /",
        "shop/admin GET /users/me",
        "shop/admin DELETE /users/{id}",
        "shop/admin GET /users/{id}",
        "shop/admin GET /{id}",
        "shop/admin GET /*",
        "shop/orders *",
        "shop/root *",
    ]


def test_operations_come_before_the_catch_all_of_the_same_base_path() -> None:
    config = translate(
        api("z-ops", basePath="/orders", operations=[{"method": "GET", "path": "/*"}], backends=[backend()]),
        api("a-all", basePath="/orders", backends=[backend()]),
    )
    assert routes_of(config) == ["shop/z-ops GET /*", "shop/a-all *"]


def test_weighted_backends_leave_out_zero_weights() -> None:
    config = translate(
        api(
            "orders",
            basePath="/orders",
            backends=[
                backend("10.0.0.1", 8080, weight=3),
                backend("10.0.0.2", 8080, weight=0),
                backend("orders.internal", 8081, weight=1),
            ],
        )
    )
    action = config.routes[0].virtual_hosts[0].routes[0].route
    assert [(unversioned(c.name), c.weight.value) for c in action.weighted_clusters.clusters] == [
        ("api.shop.orders.0", 3),
        ("api.shop.orders.2", 1),
    ]
    assert [unversioned(c.name) for c in config.clusters] == ["api.shop.orders.0", "api.shop.orders.2"]
    assert [unversioned(e.cluster_name) for e in config.endpoints] == ["api.shop.orders.0"]


def test_one_serving_backend_is_a_plain_cluster() -> None:
    config = translate(api("a", basePath="/", backends=[backend(weight=0), backend("10.0.0.9", 80)]))
    action = config.routes[0].virtual_hosts[0].routes[0].route
    assert unversioned(action.cluster) == "api.shop.a.1"
    assert not action.HasField("weighted_clusters")


def test_hostname_backend_is_strict_dns_with_inline_endpoints() -> None:
    config = translate(api("a", basePath="/", backends=[backend("orders.svc.cluster.local", 8080)]))
    (cluster,) = config.clusters
    assert cluster.type == cluster_pb2.Cluster.STRICT_DNS
    assert cluster.dns_lookup_family == cluster_pb2.Cluster.V4_PREFERRED
    assert not cluster.HasField("eds_cluster_config")
    assert unversioned(cluster.load_assignment.cluster_name) == "api.shop.a.0"
    address = cluster.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address
    assert (address.address, address.port_value) == ("orders.svc.cluster.local", 8080)
    assert config.endpoints == []


@pytest.mark.parametrize("host", ["::1", "[::1]", "192.168.1.20"])
def test_ip_backend_is_eds(host: str) -> None:
    config = translate(api("a", basePath="/", backends=[backend(host, 443)]))
    assert config.clusters[0].type == cluster_pb2.Cluster.EDS
    address = config.endpoints[0].endpoints[0].lb_endpoints[0].endpoint.address.socket_address
    assert address.address == host.strip("[]")


@pytest.mark.parametrize(("protocol", "http2"), [("http", False), ("http2", True), ("grpc", True)])
def test_backend_protocol_is_explicit(protocol: str, http2: bool) -> None:
    config = translate(api("a", basePath="/", backends=[backend(protocol=protocol)]))
    explicit = protocol_options(config.clusters[0]).explicit_http_config
    assert explicit.WhichOneof("protocol_config") == ("http2_protocol_options" if http2 else "http_protocol_options")


def test_timeouts_and_retries_come_from_the_first_serving_backend() -> None:
    retries = {"attempts": 3, "perTryTimeout": "250ms", "on": "5xx,reset"}
    config = translate(
        api(
            "a",
            basePath="/",
            timeout="30s",
            backends=[
                backend(weight=0, timeout="1s"),
                backend("10.0.0.1", 80, timeout="1m30s", retries=retries),
                backend("10.0.0.2", 80, timeout="2s"),
            ],
        ),
        api("b", basePath="/b", timeout="30s", backends=[backend()]),
        api("c", basePath="/c", backends=[backend()]),
    )
    actions = {r.name: r.route for r in config.routes[0].virtual_hosts[0].routes}
    first = actions["shop/a *"]
    assert first.timeout.ToMilliseconds() == 90_000
    assert (first.retry_policy.retry_on, first.retry_policy.num_retries.value) == ("5xx,reset", 3)
    assert first.retry_policy.per_try_timeout.ToMilliseconds() == 250
    assert actions["shop/b *"].timeout.ToSeconds() == 30
    assert not actions["shop/b *"].HasField("retry_policy")
    assert not actions["shop/c *"].HasField("timeout")


def test_rewrite_applies_the_backends_shared_base_path_to_every_weighted_backend() -> None:
    config = translate(
        api(
            "a",
            basePath="/a",
            backends=[backend(basePath="/v2", weight=0), backend(basePath="/v2"), backend(basePath="/v2")],
        )
    )
    route = config.routes[0].virtual_hosts[0].routes[0]
    assert forwarded_path(route, "/a/b") == "/v2/b"


def test_virtual_hosts_carry_every_api_whose_hostnames_cover_their_domains() -> None:
    config = translate(
        api("exact", basePath="/exact", hostnames=["a.com", "b.a.com"], backends=[backend()]),
        api("wild", basePath="/wild", hostnames=["*.a.com"], backends=[backend()]),
        api("any", basePath="/any", backends=[backend()]),
        api("org", basePath="/org", hostnames=["c.org", "d.org"], backends=[backend()]),
    )
    table = config.routes[0]
    assert [(list(v.domains), sorted(r.name for r in v.routes)) for v in table.virtual_hosts] == [
        (["*"], ["shop/any *"]),
        (["*.a.com"], ["shop/any *", "shop/wild *"]),
        (["a.com"], ["shop/any *", "shop/exact *"]),
        (["b.a.com"], ["shop/any *", "shop/exact *", "shop/wild *"]),
        (["c.org", "d.org"], ["shop/any *", "shop/org *"]),
    ]
    assert [v.name for v in table.virtual_hosts] == ["*", "*.a.com", "a.com", "b.a.com", "c.org"]

    def reaches(host: str, path: str) -> str | None:
        route = select(table, host, "GET", path)
        return route.name if route else None

    assert reaches("a.com:8443", "/exact/x") == "shop/exact *"
    assert reaches("x.a.com", "/exact/x") is None
    assert reaches("x.a.com", "/wild") == "shop/wild *"
    assert reaches("b.a.com", "/wild") == "shop/wild *"
    assert reaches("a.com", "/wild") is None
    assert reaches("elsewhere", "/any") == "shop/any *"
    assert reaches("d.org", "/org/1") == "shop/org *"


def test_same_name_in_two_projects_does_not_collide() -> None:
    config = translate(
        api("orders", "shop", basePath="/shop", backends=[backend()]),
        api("orders", "billing", basePath="/billing", backends=[backend("10.1.1.1", 81)]),
    )
    assert [unversioned(c.name) for c in config.clusters] == ["api.billing.orders.0", "api.shop.orders.0"]
    assert sorted(routes_of(config)) == ["billing/orders *", "shop/orders *"]


def test_an_api_given_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="shop/orders is given twice"):
        translate(example_api(), example_api())


# Proxyless gRPC clients: an API listener and a route table of their own per API with a gRPC backend.


def proxyless(config: EnvoyConfig, target: str) -> tuple[hcm_pb2.HttpConnectionManager, route_pb2.RouteConfiguration]:
    """The HTTP connection manager of the API listener named `target` and the route table it names."""
    listener = next(listener for listener in config.listeners if listener.name == target)
    manager = hcm_pb2.HttpConnectionManager()
    assert listener.api_listener.api_listener.Unpack(manager)
    table = next(table for table in config.routes if table.name == manager.rds.route_config_name)
    return manager, table


def test_grpc_api_gets_an_api_listener_for_proxyless_clients() -> None:
    config = translate(api("echo", basePath="/", backends=[backend(protocol="grpc")]))

    assert [listener.name for listener in config.listeners] == ["echo.shop", "gateway"]
    assert [table.name for table in config.routes] == ["gateway", "grpc.shop.echo"]
    listener = config.listeners[0]
    assert not listener.HasField("address") and not listener.filter_chains
    manager, table = proxyless(config, "echo.shop")
    assert manager.rds.route_config_name == "grpc.shop.echo"
    assert manager.rds.config_source.HasField("ads")
    assert manager.rds.config_source.resource_api_version == config_source_pb2.ApiVersion.V3
    assert [f.name for f in manager.http_filters] == ["envoy.filters.http.router"]
    assert manager.http_filters[-1].typed_config.Is(router_pb2.Router.DESCRIPTOR)

    (vhost,) = table.virtual_hosts
    assert (vhost.name, list(vhost.domains)) == ("echo.shop", ["*", "echo.shop"])
    (route,) = vhost.routes
    assert route.match.prefix == "/"
    assert unversioned(route.route.cluster) == "api.shop.echo.0"
    assert not route.route.HasField("regex_rewrite") and not route.route.HasField("timeout")

    (cluster,) = config.clusters
    assert cluster.type == cluster_pb2.Cluster.EDS and cluster.eds_cluster_config.eds_config.HasField("ads")
    (locality,) = config.endpoints[0].endpoints
    assert locality.HasField("locality") and locality.load_balancing_weight.value == 1


def test_the_gateway_gets_the_same_table_for_a_grpc_api() -> None:
    grpc_api = api("echo", basePath="/", backends=[backend(protocol="grpc")])
    http_api = api("echo", basePath="/", backends=[backend(protocol="http2")])
    gateway = [table for table in translate(grpc_api).routes if table.name == "gateway"]
    # The two backends differ in protocol, so their clusters are named apart; the tables agree otherwise.
    assert _clusters_unversioned(gateway) == _clusters_unversioned(translate(http_api).routes)


def _clusters_unversioned(tables: list[route_pb2.RouteConfiguration]) -> list[route_pb2.RouteConfiguration]:
    copies = []
    for table in tables:
        copy = route_pb2.RouteConfiguration()
        copy.CopyFrom(table)
        for host in copy.virtual_hosts:
            for route in host.routes:
                if route.route.cluster:
                    route.route.cluster = unversioned(route.route.cluster)
        copies.append(copy)
    return copies


@pytest.mark.parametrize(
    ("base_path", "matcher", "value"),
    [
        ("/meshplane.test.Echo", "prefix", "/meshplane.test.Echo/"),
        ("/a/b", "safe_regex", "/a/b(?:/.*)?"),
    ],
)
def test_proxyless_route_matches_under_the_base_path_without_path_separated_prefix(
    base_path: str, matcher: str, value: str
) -> None:
    config = translate(api("echo", basePath=base_path, backends=[backend(protocol="grpc", basePath=base_path)]))
    (route,) = proxyless(config, "echo.shop")[1].virtual_hosts[0].routes
    assert route.match.WhichOneof("path_specifier") == matcher
    assert (route.match.prefix or route.match.safe_regex.regex) == value


def test_proxyless_routes_are_the_post_operations_most_specific_first() -> None:
    operations = [
        {"method": "POST", "path": "/{method}"},
        {"method": "GET", "path": "/Say"},
        {"method": "POST", "path": "/Say"},
    ]
    base = "/meshplane.test.Echo"
    config = translate(
        api("echo", basePath=base, operations=operations, backends=[backend(protocol="grpc", basePath=base)])
    )
    table = proxyless(config, "echo.shop")[1]
    assert [r.name for r in table.virtual_hosts[0].routes] == ["shop/echo POST /Say", "shop/echo POST /{method}"]
    assert [r.match.WhichOneof("path_specifier") for r in table.virtual_hosts[0].routes] == ["path", "safe_regex"]
    assert all(not r.match.headers for r in table.virtual_hosts[0].routes)
    assert select(table, "echo.shop", "POST", "/meshplane.test.Echo/Say").name == "shop/echo POST /Say"
    assert select(table, "echo.shop", "POST", "/meshplane.test.Echo/Other").name == "shop/echo POST /{method}"
    assert select(table, "echo.shop", "POST", "/other.Service/Say") is None


def test_proxyless_virtual_host_answers_for_the_target_and_the_api_hostnames() -> None:
    config = translate(api("echo", basePath="/", hostnames=["a.com"], backends=[backend(protocol="grpc")]))
    assert list(proxyless(config, "echo.shop")[1].virtual_hosts[0].domains) == ["a.com", "echo.shop"]


def test_proxyless_routes_split_by_weight_over_the_grpc_ip_backends_only() -> None:
    config = translate(
        api(
            "echo",
            basePath="/",
            backends=[
                backend("10.0.0.1", protocol="grpc", weight=3),
                backend("10.0.0.2", protocol="http2"),
                backend("echo.internal", protocol="grpc"),
                backend("10.0.0.4", protocol="grpc", weight=0),
                backend("10.0.0.5", protocol="grpc", weight=1),
            ],
        )
    )
    action = proxyless(config, "echo.shop")[1].virtual_hosts[0].routes[0].route
    assert [(unversioned(c.name), c.weight.value) for c in action.weighted_clusters.clusters] == [
        ("api.shop.echo.0", 3),
        ("api.shop.echo.4", 1),
    ]


@pytest.mark.parametrize(
    "backends",
    [
        [backend(protocol="http2")],
        [backend("echo.internal", protocol="grpc")],
        [backend(protocol="grpc", weight=0), backend("10.0.0.2", protocol="http2")],
    ],
)
def test_no_proxyless_listener_without_a_serving_grpc_backend_on_an_ip(backends: list[dict]) -> None:
    config = translate(api("echo", basePath="/", backends=backends))
    assert [listener.name for listener in config.listeners] == ["gateway"]
    assert [table.name for table in config.routes] == ["gateway"]


def test_no_proxyless_listener_when_the_backend_needs_a_path_rewrite() -> None:
    """gRPC cannot rewrite paths; a listener forwarding `/echo/...` unchanged would not be this API."""
    config = translate(api("echo", basePath="/echo", backends=[backend(protocol="grpc", basePath="/")]))
    assert [listener.name for listener in config.listeners] == ["gateway"]


def test_proxyless_timeout_is_max_stream_duration_and_retries_keep_grpc_conditions() -> None:
    config = translate(
        api(
            "a",
            basePath="/",
            timeout="30s",
            backends=[backend(protocol="grpc", retries={"attempts": 2, "on": "5xx, unavailable,cancelled,reset"})],
        ),
        api("b", basePath="/", backends=[backend(protocol="grpc", timeout="1s", retries={"attempts": 2, "on": "5xx"})]),
    )
    first = proxyless(config, "a.shop")[1].virtual_hosts[0].routes[0].route
    assert first.max_stream_duration.max_stream_duration.ToSeconds() == 30
    assert not first.HasField("timeout")
    assert (first.retry_policy.retry_on, first.retry_policy.num_retries.value) == ("unavailable,cancelled", 2)
    second = proxyless(config, "b.shop")[1].virtual_hosts[0].routes[0].route
    assert second.max_stream_duration.max_stream_duration.ToMilliseconds() == 1000
    assert not second.HasField("retry_policy")
