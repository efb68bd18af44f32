"""The translator keeps what it derives from the objects an agent holds (see `memo`): translating the same held
objects again, with other entitlements and settings in between, must give exactly what fresh copies give."""

from __future__ import annotations

from typing import Any

import pytest

from meshplane.agent.translate import EnvoyConfig, GatewaySettings, translate_apis
from meshplane.agent.translate.entitlements import Entitlements
from meshplane.model.registry import REGISTRY
from meshplane.model.resource import Resource
from meshplane_testing.translate_factories import LOOPBACK, backend

NOW = 1_800_000_000.0
PLAIN = GatewaySettings(backends=LOOPBACK, ratelimiter_address="127.0.0.1:18082")
SERVICES = GatewaySettings(backends=LOOPBACK, enforcer_address="127.0.0.1:18081", ratelimiter_address="127.0.0.1:18082")
KEYS_INSIDE = GatewaySettings(backends=LOOPBACK, ratelimiter_address="127.0.0.1:18082", keys_filter="/keys.wasm")


def document(kind: str, name: str, spec: dict[str, Any], project: str | None = "shop") -> dict[str, Any]:
    metadata = {"name": name, **({"project": project} if project else {}), "uid": f"uid-{name}"}
    return {"kind": kind, "metadata": metadata, "spec": spec}


APIS = [
    document(
        "API",
        "orders",
        {
            "basePath": "/orders",
            "backends": [backend(basePath="/v1")],
            "authentication": {"apiKey": {"mode": "opaque"}},
            "cors": {"allowOrigins": ["https://app.example"]},
            "rateLimit": {"requestsPerUnit": 10, "unit": "second", "scope": "global"},
            "operations": [
                {"method": "GET", "path": "/items", "rateLimit": {"requestsPerUnit": 3, "unit": "minute"}},
                {"method": "POST", "path": "/items"},
            ],
        },
    ),
    document("API", "pets", {"basePath": "/pets", "backends": [backend()], "authentication": {"apiKey": {}}}),
    document("API", "open", {"basePath": "/", "backends": [backend(port=9002)]}),
]


def entitlements(*subscribed: str, plan_limit: int | None = None) -> Entitlements:
    """Applications `mobile` and `web`, the first subscribed to `subscribed` on plan gold; `plan_limit`: a
    local limit on gold."""
    held = [
        document("Application", "mobile", {}),
        document("Application", "web", {}),
        *(
            document("Subscription", f"mobile-{api}", {"application": "mobile", "api": api, "plan": "gold"})
            for api in subscribed
        ),
    ]
    if plan_limit is not None:
        target = {"kind": "SubscriptionPlan", "name": "gold"}
        held.append(
            document("RateLimitPolicy", "gold", {"target": target, "requestsPerUnit": plan_limit, "unit": "hour"})
        )
    return Entitlements.of(REGISTRY.parse(item) for item in held)


def fresh() -> list[Resource]:
    return [REGISTRY.parse(item) for item in APIS]


ROUNDS = [
    (PLAIN, entitlements("orders", "pets")),
    (PLAIN, entitlements()),
    (SERVICES, entitlements("pets", plan_limit=5)),
    (KEYS_INSIDE, entitlements("orders", plan_limit=7)),
    (PLAIN, entitlements("orders", plan_limit=5)),
    (PLAIN, entitlements("orders", "pets")),
]


def translated(apis: list[Resource], settings: GatewaySettings, granted: Entitlements) -> EnvoyConfig:
    return translate_apis(apis, settings, granted, NOW)


@pytest.mark.parametrize("start", range(len(ROUNDS)))
def test_held_objects_translate_as_fresh_copies_whatever_came_before(start: int) -> None:
    held = fresh()
    for settings, granted in ROUNDS[start:] + ROUNDS[:start]:
        assert translated(held, settings, granted) == translated(fresh(), settings, granted)


def test_a_rebuild_does_not_change_what_the_last_one_returned() -> None:
    held = fresh()
    first = translated(held, PLAIN, entitlements("orders", "pets", plan_limit=5))
    kept = [table.SerializeToString(deterministic=True) for table in first.routes]
    translated(held, SERVICES, entitlements())
    assert [table.SerializeToString(deterministic=True) for table in first.routes] == kept
