"""The gateway's listener never changes with the catalog: a listener change drains every open connection."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from meshplane.agent.translate import GatewaySettings, translate_apis
from meshplane.agent.translate.entitlements import Entitlements
from meshplane.model.resource import Resource
from meshplane_testing.translate_factories import LOOPBACK, api, backend
from tests.unit.translate.test_access import JWK, NOW, SERVICES, application, key, obj

OTHER_JWK = {**JWK, "kid": "k2"}
USER_JWKS = json.dumps({"keys": [JWK]})


def catalog() -> tuple[list[Resource], list[Resource]]:
    """APIs and entitlements with a bit of everything, the base every change below is made to."""
    apis = [
        api("orders", basePath="/orders", backends=[backend()], authentication={"apiKey": {}}),
        api("open", basePath="/open", backends=[backend()]),
    ]
    held = [
        obj("KeySet", "api-keys", {"issuer": "meshplane", "keys": [JWK]}, project=None),
        application("mobile"),
        obj("Subscription", "mobile-orders", {"application": "mobile", "api": "orders", "plan": "gold"}),
        key("k-live", "mobile"),
    ]
    return apis, held


def plan_limit(requests: int, scope: str = "local") -> Resource:
    target = {"kind": "SubscriptionPlan", "name": "gold"}
    return obj(
        "RateLimitPolicy", "gold", {"target": target, "requestsPerUnit": requests, "unit": "second", "scope": scope}
    )


Change = Callable[[list[Resource], list[Resource]], None]
CHANGES: dict[str, Change] = {
    "subscription": lambda apis, held: held.append(
        obj("Subscription", "web-orders", {"application": "mobile", "api": "open", "plan": "silver"})
    ),
    "application": lambda apis, held: held.append(application("web")),
    "subscription on a limited plan": lambda apis, held: held.extend(
        [application("web"), obj("Subscription", "web-orders", {"application": "web", "api": "orders", "plan": "gold"})]
    ),
    "local plan limit": lambda apis, held: held.append(plan_limit(5)),
    "global plan limit": lambda apis, held: held.append(plan_limit(5, "global")),
    "key": lambda apis, held: held.append(key("k-new", "mobile")),
    "revocation": lambda apis, held: held.append(key("k-gone", "mobile", revoked=True)),
    "signing-key rotation": lambda apis, held: held.__setitem__(
        0, obj("KeySet", "api-keys", {"issuer": "meshplane", "keys": [JWK, OTHER_JWK]}, project=None)
    ),
    "key set withdrawn": lambda apis, held: held.pop(0),
    "JWT provider": lambda apis, held: apis.append(
        api(
            "users",
            basePath="/users",
            backends=[backend()],
            authentication={"jwt": {"issuer": "https://idp.example", "jwks": USER_JWKS}},
        )
    ),
    "remote JWT provider": lambda apis, held: apis.append(
        api(
            "remote",
            basePath="/remote",
            backends=[backend()],
            authentication={"jwt": {"issuer": "https://idp.example", "jwksUri": "https://idp.example/jwks.json"}},
        )
    ),
    "opaque keys": lambda apis, held: apis.append(
        api("opaque", basePath="/opaque", backends=[backend()], authentication={"apiKey": {"mode": "opaque"}})
    ),
    "CORS": lambda apis, held: apis.append(
        api("cors", basePath="/cors", backends=[backend()], cors={"allowOrigins": ["https://app.example"]})
    ),
    "API limit": lambda apis, held: apis.__setitem__(
        1, api("open", basePath="/open", backends=[backend()], rateLimit={"requestsPerUnit": 3, "unit": "second"})
    ),
    "global API limit": lambda apis, held: apis.__setitem__(
        1,
        api(
            "open",
            basePath="/open",
            backends=[backend()],
            rateLimit={"requestsPerUnit": 3, "unit": "second", "scope": "global"},
        ),
    ),
    "API backend changed": lambda apis, held: apis.__setitem__(
        1, api("open", basePath="/open", backends=[backend(port=9002, timeout="3s")])
    ),
    "API removed": lambda apis, held: apis.pop(0),
    "every API removed": lambda apis, held: apis.clear(),
}


@pytest.mark.parametrize("settings", [SERVICES, GatewaySettings(backends=LOOPBACK)], ids=["services", "bare"])
@pytest.mark.parametrize("change", list(CHANGES))
def test_the_listener_is_byte_identical_across_catalog_changes(settings: GatewaySettings, change: str) -> None:
    apis, held = catalog()
    before = translate_apis(apis, settings, Entitlements.of(held), NOW).listeners
    CHANGES[change](apis, held)
    after = translate_apis(apis, settings, Entitlements.of(held), NOW).listeners

    gateway = [listener.SerializeToString(deterministic=True) for listener in before if listener.name == "gateway"]
    assert gateway == [
        listener.SerializeToString(deterministic=True) for listener in after if listener.name == "gateway"
    ]


UNRELATED_TO_LOCAL_LIMITS = [
    "subscription",
    "subscription on a limited plan",
    "application",
    "key",
    "revocation",
    "signing-key rotation",
    "JWT provider",
]


@pytest.mark.parametrize("change", UNRELATED_TO_LOCAL_LIMITS)
def test_local_buckets_live_in_a_config_only_local_limits_change(change: str) -> None:
    """Envoy makes new local buckets when the local filter's config is replaced: subscriptions to a locally
    limited plan (each caller gets a bucket of its own from a wildcard) and other changes leave it as is."""
    apis, held = catalog()
    held.append(plan_limit(5))
    apis.append(
        api("counted", basePath="/counted", backends=[backend()], rateLimit={"requestsPerUnit": 3, "unit": "minute"})
    )
    before = translate_apis(apis, SERVICES, Entitlements.of(held), NOW).extension_configs
    CHANGES[change](apis, held)
    after = translate_apis(apis, SERVICES, Entitlements.of(held), NOW).extension_configs

    local = "envoy.filters.http.local_ratelimit"
    assert [e for e in before if e.name == local] == [e for e in after if e.name == local]
