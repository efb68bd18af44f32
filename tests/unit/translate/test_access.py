"""Authentication, subscriptions, scopes, CORS and limits as the translator compiles them for Envoy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

import pytest
from envoy.extensions.filters.http.jwt_authn.v3 import config_pb2 as jwt_pb2
from envoy.extensions.filters.http.local_ratelimit.v3 import local_rate_limit_pb2
from envoy.extensions.filters.http.rbac.v3 import rbac_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from google.protobuf import json_format
from google.protobuf.message import Message

from meshplane.agent.translate import EnvoyConfig, GatewaySettings, translate_apis
from meshplane.agent.translate.entitlements import Entitlements
from meshplane.agent.translate.feeds import enforcer_feed, limiter_feed
from meshplane.agent.translate.translate import api_views
from meshplane.dataplane import ENFORCER_API_TYPE, ENFORCER_APPLICATION_TYPE, RATELIMIT_CONFIG_TYPE
from meshplane.model.registry import REGISTRY
from meshplane.model.resource import Resource
from meshplane_testing.envoy import validate
from meshplane_testing.static_bootstrap import static_bootstrap
from meshplane_testing.translate_factories import LOOPBACK, api, backend

M = TypeVar("M", bound=Message)
NOW = 1_800_000_000.0
CHAIN = [
    "envoy.filters.http.header_mutation",
    "envoy.filters.http.cors",
    "envoy.filters.http.jwt_authn",
    "envoy.filters.http.ext_authz",
    "meshplane.revoked",
    "meshplane.unbound",
    "envoy.filters.http.rbac",
    "envoy.filters.http.local_ratelimit",
    "envoy.filters.http.ratelimit",
    "envoy.filters.http.router",
]
"""The gateway's filter chain with an enforcer and a rate limiter, whatever the APIs."""
JWK = {"kty": "EC", "crv": "P-256", "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU", "kid": "k1", "alg": "ES256"}
JWK["y"] = "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"
SERVICES = GatewaySettings(backends=LOOPBACK, enforcer_address="127.0.0.1:18081", ratelimiter_address="127.0.0.1:18082")


def obj(kind: str, name: str, spec: dict[str, Any], project: str | None = "shop", uid: str | None = None) -> Resource:
    metadata = {"name": name, **({"project": project} if project else {}), **({"uid": uid} if uid else {})}
    return REGISTRY.parse({"kind": kind, "metadata": metadata, "spec": spec})


def gold_plan_limit(scope: str, requests: int = 5, unit: str = "hour") -> Resource:
    """A RateLimitPolicy on the plan `gold` (the factory's subscription of `mobile` to `orders`)."""
    target = {"kind": "SubscriptionPlan", "name": "gold"}
    return obj("RateLimitPolicy", "gold", {"target": target, "requestsPerUnit": requests, "unit": unit, "scope": scope})


def application(name: str, uid: str | None = None) -> Resource:
    return obj("Application", name, {}, uid=uid or f"uid-{name}")


def key(name: str, app: str, **spec: Any) -> Resource:
    fields = {"application": app, "applicationUid": f"uid-{app}", "created": "2026-01-01T00:00:00Z"}
    return obj("ApplicationKey", name, {**fields, "sha256": "ab" * 32, **spec})


def entitlements(*extra: Resource) -> Entitlements:
    return Entitlements.of(
        [
            obj("KeySet", "api-keys", {"issuer": "meshplane", "keys": [JWK]}, project=None),
            application("mobile"),
            application("web"),
            obj("Subscription", "mobile-orders", {"application": "mobile", "api": "orders", "plan": "gold"}),
            obj("Subscription", "web-orders", {"application": "web", "api": "orders", "state": "blocked"}),
            key("k-live", "mobile"),
            key("k-revoked", "mobile", revoked=True),
            key("k-rotated", "mobile", expires="2020-01-01T00:00:00Z"),
            *extra,
        ]
    )


def orders(**spec: Any) -> Resource:
    fields = {"basePath": "/orders", "backends": [backend()], "authentication": {"apiKey": {}}, **spec}
    return api("orders", **fields)


def manager(config: EnvoyConfig) -> hcm_pb2.HttpConnectionManager:
    listener = next(item for item in config.listeners if item.name == "gateway")
    unpacked = hcm_pb2.HttpConnectionManager()
    listener.filter_chains[0].filters[0].typed_config.Unpack(unpacked)
    return unpacked


def filter_names(config: EnvoyConfig) -> list[str]:
    return [item.name for item in manager(config).http_filters]


def discovered(config: EnvoyConfig, name: str, message: M) -> M:
    """The config a discovered filter of the gateway follows (its ECDS resource)."""
    (extension,) = [item for item in config.extension_configs if item.name == name]
    assert extension.typed_config.Unpack(message)
    return message


def routes(config: EnvoyConfig) -> dict[str, Any]:
    table = next(table for table in config.routes if table.name == "gateway")
    return {route.name: route for host in table.virtual_hosts for route in host.routes}


def test_the_filter_chain_depends_on_the_gateway_services_alone() -> None:
    config = translate_apis([api("open", basePath="/open", backends=[backend()])], SERVICES, entitlements(), NOW)
    bare = translate_apis([orders()], GatewaySettings(backends=LOOPBACK), entitlements(), NOW)

    assert filter_names(config) == CHAIN
    assert filter_names(bare) == [name for name in CHAIN if not name.endswith(("ext_authz", ".ratelimit"))]
    discovered_filters = [item.name for item in manager(config).http_filters if item.HasField("config_discovery")]
    assert discovered_filters == [
        "envoy.filters.http.jwt_authn",
        "meshplane.revoked",
        "meshplane.unbound",
        "envoy.filters.http.local_ratelimit",
    ]
    assert sorted(item.name for item in config.extension_configs) == sorted(discovered_filters)
    # Until its config arrives, each discovered filter refuses keys rather than let them through.
    revoked = manager(config).http_filters[4].config_discovery
    assert revoked.apply_default_config_without_warming
    default = rbac_pb2.RBAC()
    revoked.default_config.Unpack(default)
    assert default.rules.action == default.rules.DENY


def test_signed_keys_compile_to_jwt_authn_then_revocation_then_subscriptions() -> None:
    config = translate_apis([orders()], SERVICES, entitlements(), NOW)

    jwt = discovered(config, "envoy.filters.http.jwt_authn", jwt_pb2.JwtAuthentication())
    provider = jwt.providers["apikey:x-api-key:"]
    assert json.loads(provider.local_jwks.inline_string) == {"keys": [JWK]}
    assert not provider.forward
    assert not jwt.bypass_cors_preflight
    # Revoked keys: one lookup of the key id header jwt_authn sets, in the revoked filter's own config.
    revoked = discovered(config, "meshplane.revoked", rbac_pb2.RBAC())
    tree = revoked.matcher.matcher_tree
    assert sorted(tree.exact_match_map.map) == ["k-revoked", "k-rotated"]
    table = next(table for table in config.routes if table.name == "gateway")
    assert "meshplane.revoked" not in table.virtual_hosts[0].typed_per_filter_config
    # ... and keys of applications the cluster does not hold, by the uid each key names.
    unbound = discovered(config, "meshplane.unbound", rbac_pb2.RBAC())
    present, not_held = unbound.rules.policies["revoked"].principals[0].and_ids.ids
    assert [p.key for p in present.metadata.path] == ["apikey", "jti"] and present.metadata.value.present_match
    assert not_held.not_id.metadata.value.string_match.safe_regex.regex == "^(uid\\-mobile|uid\\-web)$"


def test_keys_bound_to_an_earlier_application_of_the_name_serve_no_one() -> None:
    reborn = Entitlements.of(
        [
            application("mobile", uid="uid-reborn"),
            key("k-old", "mobile", sha256="cd" * 32),
            key("k-old-revoked", "mobile", revoked=True),
            key("k-new", "mobile", applicationUid="uid-reborn"),
            key("k-unbound", "mobile", applicationUid=None, sha256="ef" * 32),
        ]
    )

    assert sorted(k.id for k in reborn.keys) == ["k-new", "k-unbound"]
    assert reborn.refused_key_ids(NOW) == []
    digests = enforcer_feed([], reborn)[ENFORCER_APPLICATION_TYPE]["shop/mobile"]
    assert sorted(d.id for d in digests.keys) == ["k-new", "k-unbound"]


def test_only_active_subscriptions_of_held_applications_are_let_in_named_by_plan() -> None:
    config = translate_apis([orders()], SERVICES, entitlements(), NOW)
    route = routes(config)["shop/orders *"]
    per_route = rbac_pb2.RBACPerRoute()
    route.typed_per_filter_config["envoy.filters.http.rbac"].Unpack(per_route)

    policies = per_route.rbac.rules.policies
    assert list(policies) == ["gold"]
    assert [p.metadata.value.string_match.exact for p in policies["gold"].principals] == ["uid-mobile"]
    assert [s.key for s in policies["gold"].principals[0].metadata.path] == ["apikey", "uid"]
    assert [h.header.key for h in route.request_headers_to_add] == ["x-meshplane-plan"]


def test_key_records_running_out_later_are_not_refused_yet_and_wake_the_agent() -> None:
    later = entitlements(key("k-later", "mobile", expires="2030-01-01T00:00:00Z"))

    assert later.refused_key_ids(NOW) == ["k-revoked", "k-rotated"]
    assert later.next_expiry(NOW) == pytest.approx(1893456000.0)


def test_opaque_keys_go_to_the_enforcer_or_answer_503_without_one() -> None:
    opaque = orders(authentication={"apiKey": {"mode": "opaque", "query": "key"}})

    with_enforcer = translate_apis([opaque], SERVICES, entitlements(), NOW)
    without = translate_apis([opaque], GatewaySettings(backends=LOOPBACK), entitlements(), NOW)

    assert "envoy.filters.http.ext_authz" in filter_names(with_enforcer)
    assert manager(with_enforcer).http_filters[3].disabled
    assert "meshplane.enforcer" in {cluster.name for cluster in with_enforcer.clusters}
    assert "envoy.filters.http.ext_authz" in routes(with_enforcer)["shop/orders *"].typed_per_filter_config
    refused = routes(without)["shop/orders *"]
    assert refused.direct_response.status == 503
    assert "envoy.filters.http.ext_authz" not in filter_names(without)
    assert "meshplane.enforcer" not in {cluster.name for cluster in without.clusters}


def test_signed_keys_without_a_key_set_answer_503() -> None:
    config = translate_apis([orders()], SERVICES, Entitlements(), NOW)

    assert routes(config)["shop/orders *"].direct_response.status == 503


def test_enforcer_gets_opaque_apis_and_digests_of_keys_in_force_only() -> None:
    opaque = orders(authentication={"apiKey": {"mode": "opaque"}})
    resources = enforcer_feed(api_views([opaque]), entitlements())

    assert list(resources[ENFORCER_API_TYPE]) == ["shop/orders"]
    mobile = resources[ENFORCER_APPLICATION_TYPE]["shop/mobile"]
    assert sorted(k.id for k in mobile.keys) == ["k-live", "k-rotated"]
    assert next(k for k in mobile.keys if k.id == "k-rotated").expires_unix == 1577836800


def test_local_limits_share_one_filter_and_global_ones_need_the_limiter() -> None:
    policies = [
        obj(
            "RateLimitPolicy",
            "gold",
            {"target": {"kind": "SubscriptionPlan", "name": "gold"}, "requestsPerUnit": 5, "unit": "second"},
        ),
        obj(
            "RateLimitPolicy",
            "writes",
            {
                "target": {"kind": "Operation", "name": "orders", "operation": {"method": "POST", "path": "/items"}},
                "requestsPerUnit": 2,
                "unit": "minute",
                "scope": "local",
            },
        ),
    ]
    spec = {
        "operations": [{"method": "GET", "path": "/items"}, {"method": "POST", "path": "/items"}],
        "rateLimit": {"requestsPerUnit": 100, "unit": "minute"},
    }
    with_limiter = translate_apis([orders(**spec)], SERVICES, entitlements(*policies), NOW)
    without = translate_apis([orders(**spec)], GatewaySettings(backends=LOOPBACK), entitlements(*policies), NOW)

    assert "envoy.filters.http.ratelimit" not in filter_names(without)
    local = discovered(with_limiter, "envoy.filters.http.local_ratelimit", local_rate_limit_pb2.LocalRateLimit())
    entries = [[(e.key, e.value) for e in d.entries] for d in local.descriptors]
    assert entries == [[("api", "shop/orders")], [("api", "shop/orders"), ("operation", "POST /items")]]
    post = routes(with_limiter)["shop/orders POST /items"].route.rate_limits
    assert sorted(limit.stage.value for limit in post) == [0, 1, 1]
    config = limiter_feed(api_views([orders(**spec)]), SERVICES, entitlements(*policies))[RATELIMIT_CONFIG_TYPE]
    tree = json_format.MessageToDict(config["meshplane"])
    assert tree["descriptors"] == [
        {
            "key": "api",
            "value": "shop/orders",
            "descriptors": [
                {"key": "application", "value": "shop/mobile", "rateLimit": {"unit": "SECOND", "requestsPerUnit": 5}}
            ],
        }
    ]


def test_scopes_compile_to_rbac_on_the_user_token() -> None:
    users = api(
        "users",
        basePath="/users",
        backends=[backend()],
        authentication={"jwt": {"issuer": "https://idp.example", "jwks": json.dumps({"keys": [JWK]})}},
        operations=[
            {"method": "GET", "path": "/me"},
            {"method": "POST", "path": "/orders", "scopes": ["orders:write"]},
        ],
    )
    config = translate_apis([users], SERVICES, entitlements(), NOW)
    table = routes(config)

    authenticated = rbac_pb2.RBACPerRoute()
    table["shop/users GET /me"].typed_per_filter_config["envoy.filters.http.rbac"].Unpack(authenticated)
    assert list(authenticated.rbac.rules.policies) == ["authenticated"]
    scoped = rbac_pb2.RBACPerRoute()
    table["shop/users POST /orders"].typed_per_filter_config["envoy.filters.http.rbac"].Unpack(scoped)
    assert list(scoped.rbac.rules.policies) == ["scopes"]


def test_cors_adds_a_preflight_route_before_the_catch_all() -> None:
    config = translate_apis([orders(cors={"allowOrigins": ["https://app.example"]})], SERVICES, entitlements(), NOW)
    names = list(routes(config))

    assert names == ["shop/orders preflight", "shop/orders *"]


@pytest.mark.envoy
def test_envoy_accepts_every_policy_at_once(tmp_path: Path) -> None:
    apis = [
        orders(
            cors={"allowOrigins": ["*"], "allowMethods": ["GET"], "maxAge": "10m"},
            rateLimit={"requestsPerUnit": 10, "unit": "second", "scope": "global"},
            operations=[{"method": "GET", "path": "/items", "rateLimit": {"requestsPerUnit": 3, "unit": "minute"}}],
        ),
        api(
            "opaque",
            basePath="/opaque",
            backends=[backend()],
            authentication={"apiKey": {"mode": "opaque", "header": "x-key", "query": "key"}},
        ),
        api(
            "users",
            basePath="/users",
            backends=[backend()],
            authentication={"jwt": {"issuer": "https://idp.example", "jwksUri": "https://idp.example/jwks.json"}},
            operations=[{"method": "POST", "path": "/orders", "scopes": ["orders:write"]}],
        ),
    ]
    plan = obj(
        "RateLimitPolicy",
        "gold",
        {"target": {"kind": "SubscriptionPlan", "name": "gold"}, "requestsPerUnit": 5, "unit": "hour"},
    )
    accepted, output = validate(tmp_path, static_bootstrap(translate_apis(apis, SERVICES, entitlements(plan), NOW)))
    assert accepted, output


def test_an_api_with_operations_answers_preflights_for_its_own_paths_only() -> None:
    spec = {"operations": [{"method": "GET", "path": "/items"}, {"method": "POST", "path": "/items"}]}
    config = translate_apis(
        [orders(cors={"allowOrigins": ["https://app.example"]}, **spec)], SERVICES, entitlements(), NOW
    )
    preflight = routes(config)["shop/orders preflight /items"]

    assert list(routes(config)) == ["shop/orders preflight /items", "shop/orders GET /items", "shop/orders POST /items"]
    assert preflight.match.path == "/orders/items"
    assert "envoy.filters.http.jwt_authn" not in preflight.typed_per_filter_config


def test_the_revoked_list_leaves_out_keys_whose_signature_no_longer_passes() -> None:
    held = entitlements(
        key("k-revoked-ran-out", "mobile", revoked=True, tokenExpires="2020-01-01T00:00:00Z"),
        key("k-revoked-runs-later", "mobile", revoked=True, tokenExpires="2030-01-01T00:00:00Z", signingKeyId="k1"),
        key("k-revoked-retired-signer", "mobile", revoked=True, signingKeyId="k0"),
        key("k-rotated-ran-out", "mobile", expires="2020-01-01T00:00:00Z", tokenExpires="2020-01-02T00:00:00Z"),
    )

    assert held.refused_key_ids(NOW) == ["k-revoked", "k-revoked-runs-later", "k-rotated"]


def test_a_preflight_route_goes_before_an_options_operation_of_the_same_path() -> None:
    spec = {"operations": [{"method": "OPTIONS", "path": "/items"}, {"method": "GET", "path": "/items"}]}
    config = translate_apis(
        [orders(cors={"allowOrigins": ["https://app.example"]}, **spec)], SERVICES, entitlements(), NOW
    )

    assert list(routes(config)) == [
        "shop/orders preflight /items",
        "shop/orders GET /items",
        "shop/orders OPTIONS /items",
    ]
