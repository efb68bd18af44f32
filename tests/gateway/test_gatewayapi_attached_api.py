"""An API attached to a Gateway API HTTPRoute, served by a real Envoy with the real enforcer: the route
answers 401 without a key, 200 with a subscribed application's key, 403 with a blocked subscription's, 429
once the plan's quota is spent; a route no API targets stays open. What the agent would publish is built
here as it builds it: the Gateway API core's program, then the translator attaching the API to it."""

from __future__ import annotations

import hashlib
import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from meshplane.agent.gateway import ENFORCERS, with_resources
from meshplane.agent.translate import GatewaySettings, translate_apis
from meshplane.agent.translate.entitlements import Entitlements
from meshplane.agent.translate.feeds import enforcer_feed
from meshplane.agent.translate.translate import api_views
from meshplane.gatewayapi.program import program
from meshplane.model.registry import REGISTRY
from meshplane.model.resource import Resource
from meshplane_testing.eventually import eventually
from meshplane_testing.gatewayapi_envoy import ProgrammedEnvoy, run_programmed_envoy
from meshplane_testing.gatewayapi_objects import backend, gateway, listener, route, rule, service, state
from meshplane_testing.meshplane import run_enforcer
from meshplane_testing.process import free_port
from meshplane_testing.translate_factories import LOOPBACK
from meshplane_testing.upstream import run_upstream

pytestmark = [pytest.mark.envoy, pytest.mark.timeout(120)]

ADDRESS = "127.0.43.1"
QUOTA = 3
KEYS = {"mobile": "mobile-secret-key", "web": "web-secret-key"}
_NAMES = (f"orders{index}" for index in itertools.count(1))


def obj(kind: str, name: str, spec: dict[str, Any]) -> Resource:
    return REGISTRY.parse(
        {"kind": kind, "metadata": {"name": name, "project": "shop", "uid": f"uid-{name}"}, "spec": spec}
    )


def entitlements(api: str) -> Entitlements:
    """`mobile` subscribed to the API's plan `gold` (QUOTA an hour), `web` with its subscription blocked."""
    keys = [
        obj(
            "ApplicationKey",
            f"{api}-{app}",
            {
                "application": app,
                "applicationUid": f"uid-{app}",
                "created": "2026-01-01T00:00:00Z",
                "sha256": hashlib.sha256(secret.encode()).hexdigest(),
            },
        )
        for app, secret in KEYS.items()
    ]
    limit = {"target": {"kind": "SubscriptionPlan", "name": "gold", "api": api}, "requestsPerUnit": QUOTA}
    return Entitlements.of(
        [
            obj("Application", "mobile", {}),
            obj("Application", "web", {}),
            obj("Subscription", f"mobile-{api}", {"application": "mobile", "api": api, "plan": "gold"}),
            obj("Subscription", f"web-{api}", {"application": "web", "api": api, "plan": "gold", "state": "blocked"}),
            obj("RateLimitPolicy", f"{api}-gold", {**limit, "unit": "hour", "scope": "local"}),
            *keys,
        ]
    )


@dataclass
class Attached:
    http: httpx.Client

    def status(self, path: str, app: str | None = None) -> int:
        headers = {"x-api-key": KEYS[app]} if app is not None else {}
        return self.http.get(path, headers=headers).status_code


@pytest.fixture(scope="module")
def envoy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProgrammedEnvoy]:
    with run_programmed_envoy(tmp_path_factory.mktemp("gwapi-attached")) as served:
        yield served


@pytest.fixture(scope="module")
def served(envoy: ProgrammedEnvoy, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Attached]:
    """HTTPRoute `orders` (attached to API `orders`) and `public` (no API) on one Gateway."""
    name = next(_NAMES)
    port = free_port()
    with (
        run_upstream("orders") as (upstream, _),
        run_enforcer(tmp_path_factory.mktemp("enforcer"), envoy.xds_port) as enforcer,
    ):
        cluster = state(
            gateway("gw", listener("http", port)),
            route("orders", rule(backend("orders"), matches=[{"path": {"value": "/orders"}}])),
            route("public", rule(backend("orders"), matches=[{"path": {"value": "/public"}}])),
            services={("default", "orders"): service(("127.0.0.1", upstream))},
            addresses={("default", "gw"): ADDRESS},
        )
        target = {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "orders", "namespace": "default"}
        api = REGISTRY.parse(
            {
                "kind": "API",
                "metadata": {"name": name, "project": "shop"},
                "spec": {
                    "targetRefs": [target],
                    "authentication": {"apiKey": {"mode": "opaque", "header": "x-api-key"}},
                },
            }
        )
        settings = GatewaySettings(
            backends=LOOPBACK, listener_port=free_port(), enforcer_address=f"127.0.0.1:{enforcer.port}"
        )
        granted = entitlements(name)
        config = translate_apis([api], settings, granted, time.time(), gateway_api=program(cluster).resources)
        assert config.refused == {}
        envoy.set_services(ENFORCERS, enforcer_feed(api_views([api]), granted))
        envoy.publish(with_resources(config, config.gateway_api), ADDRESS, port)
        with httpx.Client(base_url=f"http://{ADDRESS}:{port}", timeout=10) as http:
            attached = Attached(http)
            eventually(lambda: attached.status("/orders", "mobile") == 200, timeout=20)  # the enforcer is fed
            yield attached


def test_a_targeted_route_answers_401_without_a_key(served: Attached) -> None:
    assert served.status("/orders") == 401
    assert served.http.get("/orders", headers={"x-api-key": "not-a-key"}).status_code == 401


def test_a_blocked_subscription_is_refused_403(served: Attached) -> None:
    assert served.status("/orders", "web") == 403


def test_a_route_no_api_targets_stays_open(served: Attached) -> None:
    assert served.status("/public") == 200


def test_a_subscribed_key_is_let_in_until_the_plan_quota_is_spent_then_429(served: Attached) -> None:
    answers = [served.status("/orders", "mobile") for _ in range(QUOTA + 2)]

    allowed = answers.count(200)  # the fixture's wait spent one of the quota
    assert allowed == QUOTA - 1, answers
    assert answers == [200] * allowed + [429] * (QUOTA + 2 - allowed), answers
