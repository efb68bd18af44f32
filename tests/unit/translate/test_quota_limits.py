"""Global limits by quota as the translator compiles them: quota filters in the chain, buckets named per route."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from envoy.extensions.filters.http.header_mutation.v3 import header_mutation_pb2

from meshplane.agent.translate import translate_apis
from meshplane_testing.envoy import validate
from meshplane_testing.static_bootstrap import static_bootstrap
from tests.unit.translate.test_access import (
    NOW,
    SERVICES,
    api,
    backend,
    entitlements,
    filter_names,
    gold_plan_limit,
    manager,
    routes,
)

BY_QUOTA = replace(SERVICES, global_limits_by_quota=True)
GLOBAL = {"requestsPerUnit": 100, "unit": "minute", "scope": "global"}


def limited() -> object:
    operations = [{"method": "GET", "path": "/items", "rateLimit": {**GLOBAL, "requestsPerUnit": 5}}]
    return api("orders", basePath="/orders", backends=[backend()], rateLimit=GLOBAL, operations=operations)


def test_the_quota_filters_follow_the_local_one_and_no_filter_asks_the_limiter_per_request() -> None:
    config = translate_apis([limited()], BY_QUOTA, entitlements(), NOW)

    names = filter_names(config)
    local = names.index("envoy.filters.http.local_ratelimit")
    assert names[local + 1 : local + 5] == [
        "envoy.filters.http.rate_limit_quota.api",
        "envoy.filters.http.rate_limit_quota.operation",
        "meshplane.callers",
        "envoy.filters.http.rate_limit_quota.application",
    ]
    assert "envoy.filters.http.ratelimit" not in names
    stripped = [m.remove for m in _strip(config).mutations.request_mutations]
    assert {"x-meshplane-quota-api", "x-meshplane-quota-operation", "x-meshplane-quota-caller"} <= set(stripped)


def test_a_limited_route_names_its_buckets_and_asks_no_descriptor_of_the_limiter() -> None:
    config = translate_apis([limited()], BY_QUOTA, entitlements(), NOW)

    route = routes(config)["shop/orders GET /items"]
    assert [limit.stage.value for limit in route.route.rate_limits] == []
    headers = set_headers(route, "envoy.filters.http.header_mutation")
    assert headers == {
        "x-meshplane-quota-api": "shop/orders",
        "x-meshplane-quota-operation": "shop/orders GET /items",
    }
    assert sorted(route.request_headers_to_remove) == sorted(headers)


def test_without_quotas_nothing_changes() -> None:
    config = translate_apis([limited()], SERVICES, entitlements(), NOW)

    assert not [name for name in filter_names(config) if "rate_limit_quota" in name]
    assert "envoy.filters.http.header_mutation" not in routes(config)["shop/orders GET /items"].typed_per_filter_config


def test_envoy_accepts_the_quota_filters_and_bucket_names(tmp_path: Path) -> None:
    accepted, output = validate(tmp_path, static_bootstrap(translate_apis([limited()], BY_QUOTA, entitlements(), NOW)))
    assert accepted, output


def set_headers(route: Any, filter_name: str, on: str = "request_mutations") -> dict[str, str]:
    """The request (or, `on` "response_mutations", response) headers a header_mutation filter's per-route
    config sets on `route`."""
    named = header_mutation_pb2.HeaderMutationPerRoute()
    assert route.typed_per_filter_config[filter_name].Unpack(named)
    return {m.append.header.key: m.append.header.value for m in getattr(named.mutations, on)}


def test_a_limited_route_answers_with_its_limits_the_strictest_first() -> None:
    config = translate_apis([limited()], BY_QUOTA, entitlements(), NOW)

    said = set_headers(
        routes(config)["shop/orders GET /items"], "envoy.filters.http.header_mutation", "response_mutations"
    )
    assert said == {"x-ratelimit-limit": "5, 5;w=60, 100;w=60"}


def _strip(config: object) -> header_mutation_pb2.HeaderMutation:
    (first,) = [f for f in manager(config).http_filters if f.name == "envoy.filters.http.header_mutation"]  # type: ignore[arg-type]
    unpacked = header_mutation_pb2.HeaderMutation()
    first.typed_config.Unpack(unpacked)
    return unpacked


def test_a_per_application_limit_names_the_caller_as_its_check_left_it() -> None:
    plan = gold_plan_limit("global")
    keyed = api("orders", basePath="/orders", backends=[backend()], authentication={"apiKey": {}})
    config = translate_apis([keyed], BY_QUOTA, entitlements(plan), NOW)

    route = routes(config)["shop/orders *"]
    headers = set_headers(route, "meshplane.callers")
    assert headers == {
        "x-meshplane-quota-caller-api": "shop/orders",
        "x-meshplane-quota-caller": "%DYNAMIC_METADATA(envoy.filters.http.jwt_authn:apikey:sub)%",
    }
    assert not route.route.rate_limits
