"""An API attached to a Gateway API HTTPRoute (`targetRefs`): every Envoy route of the HTTPRoute gets the
API's checks and limits as a meshplane API's routes do, and the Gateway's listeners carry the filters that
run them; a route the cluster does not serve leaves the API refused there, saying why."""

from __future__ import annotations

import json
from typing import Any

from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_components_pb2, route_pb2
from envoy.extensions.filters.http.ext_authz.v3 import ext_authz_pb2
from envoy.extensions.filters.http.jwt_authn.v3 import config_pb2 as jwt_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from google.protobuf.message import Message

from meshplane.agent.translate import EnvoyConfig, translate_apis
from meshplane.agent.translate.access import EXT_AUTHZ, JWT, filter_config
from meshplane.agent.translate.telemetry import ROUTE_METADATA, stat_prefix
from meshplane.agent.translate.translate import refused_apis
from meshplane.dataplane import CONTEXT_API
from meshplane.gatewayapi.envoy import LISTENER_TYPE, ROUTE_TYPE
from meshplane.gatewayapi.program import program
from meshplane.model.resource import Resource
from meshplane_testing.gatewayapi_objects import backend, gateway, listener, route, rule, service, state
from meshplane_testing.translate_factories import api
from tests.unit.translate.test_access import CHAIN, JWK, NOW, SERVICES, discovered, entitlements, obj

TARGET = {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "orders", "namespace": "default"}


def gateway_api() -> dict[str, dict[str, Message]]:
    """Gateway `gw` serving HTTPRoutes `orders` (two rules) and `public` on 127.0.0.1:8080."""
    served = state(
        gateway("gw", listener("http", 8080)),
        route("orders", rule(backend("orders")), rule(backend("orders"), matches=[{"path": {"value": "/v2"}}])),
        route("public", rule(backend("orders"), matches=[{"path": {"value": "/public"}}])),
        services={("default", "orders"): service(("127.0.0.1", 9000))},
        addresses={("default", "gw"): "127.0.0.1"},
    )
    return {type_url: dict(named) for type_url, named in program(served).resources.items()}


def attached(*targets: dict[str, Any], **spec: Any) -> Resource:
    return api("orders", targetRefs=list(targets or [TARGET]), authentication={"apiKey": {"mode": "opaque"}}, **spec)


def gwapi_routes(config: EnvoyConfig) -> dict[str, route_components_pb2.Route]:
    tables: dict[str, route_pb2.RouteConfiguration] = config.gateway_api[ROUTE_TYPE]  # type: ignore[assignment]
    return {entry.name: entry for table in tables.values() for host in table.virtual_hosts for entry in host.routes}


def gwapi_filters(config: EnvoyConfig) -> list[str]:
    listeners: dict[str, listener_pb2.Listener] = config.gateway_api[LISTENER_TYPE]  # type: ignore[assignment]
    manager = hcm_pb2.HttpConnectionManager()
    next(iter(listeners.values())).filter_chains[0].filters[0].typed_config.Unpack(manager)
    return [entry.name for entry in manager.http_filters]


def test_every_envoy_route_of_a_targeted_http_route_asks_the_enforcer_about_the_api() -> None:
    config = translate_apis([attached()], SERVICES, entitlements(), NOW, gateway_api=gateway_api())

    served = gwapi_routes(config)
    expected = ext_authz_pb2.ExtAuthzPerRoute(
        check_settings=ext_authz_pb2.CheckSettings(context_extensions={CONTEXT_API: "shop/orders"})
    )
    for name in ("default/orders/0/0", "default/orders/1/0"):
        assert served[name].typed_per_filter_config[EXT_AUTHZ] == filter_config(expected)
    assert EXT_AUTHZ not in served["default/public/0/0"].typed_per_filter_config
    assert gwapi_filters(config) == CHAIN
    assert config.refused == {}


def test_an_attached_api_serves_no_route_of_its_own_on_the_gateway() -> None:
    config = translate_apis([attached()], SERVICES, entitlements(), NOW, gateway_api=gateway_api())

    default = next(table for table in config.routes if table.name == "gateway")
    assert list(default.virtual_hosts) == []
    assert not any(cluster.name.startswith("api.shop.orders") for cluster in config.clusters)


def test_a_plan_limit_of_an_attached_api_is_on_the_route_as_on_a_native_one() -> None:
    policy = obj(
        "RateLimitPolicy",
        "gold-limit",
        {
            "target": {"kind": "SubscriptionPlan", "name": "gold"},
            "requestsPerUnit": 2,
            "unit": "minute",
            "scope": "local",
        },
    )
    config = translate_apis([attached()], SERVICES, entitlements(policy), NOW, gateway_api=gateway_api())

    (limit,) = gwapi_routes(config)["default/orders/0/0"].route.rate_limits
    api_entry, plan, application = limit.actions
    assert api_entry.generic_key.descriptor_value == "shop/orders"
    assert (plan.metadata.descriptor_key, application.metadata.descriptor_key) == ("plan", "application")
    assert not gwapi_routes(config)["default/public/0/0"].route.rate_limits


def test_without_attached_apis_the_gateway_api_listeners_keep_their_own_chain() -> None:
    config = translate_apis([], SERVICES, entitlements(), NOW, gateway_api=gateway_api())

    assert gwapi_filters(config) == ["envoy.filters.http.cors", "envoy.filters.http.router"]


def test_an_api_targeting_a_route_this_cluster_does_not_serve_is_refused_saying_so() -> None:
    missing = {**TARGET, "name": "gone"}
    config = translate_apis([attached(missing)], SERVICES, entitlements(), NOW, gateway_api=gateway_api())

    reason = "targets HTTPRoute default/gone, which no Gateway of this cluster serves"
    assert config.refused == {"shop/orders": reason}
    assert refused_apis([attached(missing)], SERVICES, gateway_api=gateway_api()) == {"shop/orders": reason}
    assert gwapi_filters(config) == ["envoy.filters.http.cors", "envoy.filters.http.router"]


def test_the_namespace_of_a_target_defaults_to_the_api_project() -> None:
    in_project = {key: value for key, value in TARGET.items() if key != "namespace"}
    config = translate_apis([attached(in_project)], SERVICES, entitlements(), NOW, gateway_api=gateway_api())

    assert config.refused == {"shop/orders": "targets HTTPRoute shop/orders, which no Gateway of this cluster serves"}


def test_a_jwt_api_attached_to_a_route_asks_jwt_authn_for_its_requirement_on_each_envoy_route() -> None:
    jwt = {"jwt": {"issuer": "https://id.example.com", "jwks": json.dumps({"keys": [JWK]})}}
    config = translate_apis(
        [api("orders", targetRefs=[TARGET], authentication=jwt)],
        SERVICES,
        entitlements(),
        NOW,
        gateway_api=gateway_api(),
    )

    requirement = jwt_pb2.PerRouteConfig()
    gwapi_routes(config)["default/orders/1/0"].typed_per_filter_config[JWT].Unpack(requirement)
    assert requirement.requirement_name == "jwt:shop/orders"
    assert JWT not in gwapi_routes(config)["default/public/0/0"].typed_per_filter_config
    provider = discovered(config, JWT, jwt_pb2.JwtAuthentication()).providers["jwt:shop/orders"]
    assert provider.issuer == "https://id.example.com"


def test_the_attached_routes_are_logged_and_counted_as_the_api() -> None:
    config = translate_apis([attached()], SERVICES, entitlements(), NOW, gateway_api=gateway_api())

    entry = gwapi_routes(config)["default/orders/0/0"]
    assert entry.stat_prefix == stat_prefix("shop", "orders")
    assert entry.metadata.filter_metadata[ROUTE_METADATA]["api"] == "orders"


def test_an_api_with_some_of_its_routes_missing_is_served_on_the_others_and_says_which_are_missing() -> None:
    config = translate_apis(
        [attached(TARGET, {**TARGET, "name": "gone"})], SERVICES, entitlements(), NOW, gateway_api=gateway_api()
    )

    assert config.refused == {}
    assert EXT_AUTHZ in gwapi_routes(config)["default/orders/0/0"].typed_per_filter_config
    problem = "attached to HTTPRoute default/orders; not to default/gone, which no Gateway of this cluster serves"
    assert config.api_problems == {"shop/orders": problem}


def test_a_route_two_apis_target_is_the_first_ones_and_the_other_says_so() -> None:
    other = api("payments", targetRefs=[TARGET], authentication={"apiKey": {"mode": "opaque"}})
    config = translate_apis([other, attached()], SERVICES, entitlements(), NOW, gateway_api=gateway_api())

    check = ext_authz_pb2.ExtAuthzPerRoute()
    config_of = gwapi_routes(config)["default/orders/0/0"].typed_per_filter_config[EXT_AUTHZ]
    wrapper = route_components_pb2.FilterConfig()
    config_of.Unpack(wrapper)
    wrapper.config.Unpack(check)
    assert check.check_settings.context_extensions[CONTEXT_API] == "shop/orders"
    assert config.api_problems == {"shop/payments": "HTTPRoute default/orders is attached to API shop/orders"}
