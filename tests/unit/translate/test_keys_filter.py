"""Opaque keys checked inside Envoy: the keys filter in the chain, its table, and limits naming its callers."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from envoy.extensions.filters.http.wasm.v3 import wasm_pb2
from google.protobuf import wrappers_pb2

from meshplane.agent.translate import EnvoyConfig, translate_apis
from meshplane.agent.translate.keys_filter import KEYS_FILTER
from meshplane_testing.envoy import validate
from meshplane_testing.keys_filter import keys_filter_wasm
from meshplane_testing.static_bootstrap import static_bootstrap
from tests.unit.translate.test_access import (
    NOW,
    SERVICES,
    api,
    backend,
    discovered,
    entitlements,
    filter_names,
    gold_plan_limit,
    key,
    manager,
    obj,
    routes,
)

WITH_FILTER = replace(SERVICES, keys_filter="/opt/meshplane/keys.wasm")
OPAQUE = {"apiKey": {"mode": "opaque", "header": "X-Key", "query": "key"}}


def opaque(name: str = "orders", **spec: Any) -> Any:
    fields = {"basePath": f"/{name}", "backends": [backend()], "authentication": OPAQUE, **spec}
    return api(name, **fields)


def table(config: EnvoyConfig) -> dict[str, Any]:
    plugin = discovered(config, KEYS_FILTER, wasm_pb2.Wasm()).config
    text = wrappers_pb2.StringValue()
    assert plugin.configuration.Unpack(text)
    return json.loads(text.value)


def test_the_keys_filter_stands_in_for_the_enforcer_switched_off_until_a_route_asks() -> None:
    config = translate_apis([opaque()], WITH_FILTER, entitlements(), NOW)

    names = filter_names(config)
    assert KEYS_FILTER in names and "envoy.filters.http.ext_authz" not in names
    assert manager(config).http_filters[names.index(KEYS_FILTER)].disabled
    assert "meshplane.enforcer" not in {cluster.name for cluster in config.clusters}
    route = routes(config)["shop/orders *"]
    assert route.route.cluster, "the route forwards"
    assert KEYS_FILTER in route.typed_per_filter_config
    plugin = discovered(config, KEYS_FILTER, wasm_pb2.Wasm()).config
    assert plugin.vm_config.code.local.filename == "/opt/meshplane/keys.wasm"


def test_the_table_holds_digests_apis_and_subscriptions_as_the_enforcer_would() -> None:
    held_keys = [
        key("k-own", "mobile", sha256="01" * 32, expires="2027-01-01T00:00:00Z"),
        key("k-gone", "mobile", sha256="02" * 32, revoked=True),
        key("k-a", "mobile", sha256="cd" * 32),
        key("k-b", "web", sha256="cd" * 32),
    ]
    active = obj("Subscription", "web-orders-2", {"application": "web", "api": "orders", "plan": "silver"})
    views = [opaque(), opaque("open", authentication=None)]
    config = translate_apis(views, WITH_FILTER, entitlements(*held_keys, active), NOW)

    held = table(config)
    assert held["routes"] == {"shop/orders *": "shop/orders"}
    assert held["apis"] == {"shop/orders": {"project": "shop", "name": "orders", "header": "x-key", "query": "key"}}
    # The factory's own keys share one digest, as k-a and k-b do: none of them is served; k-gone is revoked.
    assert held["keys"] == {
        "01" * 32: {"project": "shop", "application": "mobile", "id": "k-own", "expires": 1798761600}
    }
    assert held["subscriptions"]["shop/mobile/orders"] == {"plan": "gold", "active": True}
    assert held["subscriptions"]["shop/web/orders"]["active"] is False, "a blocked subscription wins"


def test_each_operation_route_names_its_api() -> None:
    ops = [{"method": "GET", "path": "/items"}, {"method": "POST", "path": "/items"}]
    config = translate_apis([opaque(operations=ops)], WITH_FILTER, entitlements(), NOW)

    assert table(config)["routes"] == {
        "shop/orders GET /items": "shop/orders",
        "shop/orders POST /items": "shop/orders",
    }


def test_per_caller_limits_read_the_caller_from_the_headers_the_filter_sets() -> None:
    plan = gold_plan_limit("local")
    config = translate_apis([opaque()], WITH_FILTER, entitlements(plan), NOW)

    (limit,) = routes(config)["shop/orders *"].route.rate_limits
    read = [(a.request_headers.header_name, a.request_headers.descriptor_key) for a in limit.actions[1:]]
    assert read == [("x-meshplane-plan", "plan"), ("x-meshplane-application", "application")]


def test_envoy_accepts_the_filter_with_its_table(tmp_path: Path) -> None:
    settings = replace(SERVICES, keys_filter=str(keys_filter_wasm()))
    config = translate_apis([opaque()], settings, entitlements(), NOW)

    accepted, output = validate(tmp_path, static_bootstrap(config))
    assert accepted, output
