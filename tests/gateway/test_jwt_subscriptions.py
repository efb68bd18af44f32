"""Subscriptions for OAuth2 / JWT callers: an Application names the identity-provider client ids it is known
by, and an API that asks for a subscription admits a token only for a client id subscribed to it — with the
application, its plan and the plan's limit applied as for an API key. Two issuers on one API.

Real processes on loopback: the server, an agent with its rate limiter on a real Redis, Envoy, and an upstream
that echoes what it received.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from meshplane_testing import documents
from meshplane_testing.access_fleet import PROJECT, data_plane
from meshplane_testing.gateway import Gateway, status
from meshplane_testing.identity import IdentityProvider
from meshplane_testing.meshplane import run_server
from meshplane_testing.north import put
from meshplane_testing.redis import RedisServer
from meshplane_testing.upstream import run_upstream

pytestmark = [pytest.mark.envoy, pytest.mark.timeout(120)]

ISSUER_A = "https://idp-a.example"
ISSUER_B = "https://idp-b.example"
AUDIENCE = "shop"
PLAN_LIMIT = 3


@dataclass
class Setting:
    gateway: Gateway
    api: httpx.Client
    idps: dict[str, IdentityProvider]

    def call(self, issuer: str | None, path: str = "/shop/items", **claims: object) -> httpx.Response:
        headers = {}
        if issuer is not None:
            headers["authorization"] = f"Bearer {self.idps[issuer].token(**claims)}"
        return self.gateway.request("GET", path, headers)


def _declare(api: httpx.Client, port: int, idps: dict[str, IdentityProvider]) -> None:
    jwt = {
        "issuer": ISSUER_A,
        "audiences": [AUDIENCE],
        "jwks": idps[ISSUER_A].jwks,
        "additionalIssuers": [{"issuer": ISSUER_B, "audiences": [AUDIENCE], "jwks": idps[ISSUER_B].jwks}],
        "requireSubscription": True,
    }
    put(api, documents.api("shop", backends=[documents.backend(port)], authentication={"jwt": jwt}))
    scoped = {**jwt, "additionalIssuers": []}
    put(
        api,
        documents.api(
            "admin",
            backends=[documents.backend(port)],
            authentication={"jwt": scoped},
            operations=[{"method": "GET", "path": "/items", "scopes": ["shop:admin"]}],
        ),
    )
    clients = {
        "mobile": [{"issuer": ISSUER_A, "clientId": "mobile-app"}],
        "partner": [{"issuer": ISSUER_B, "clientId": "partner-1"}],
        "lonely": [{"issuer": ISSUER_A, "clientId": "lonely-app"}],
        "stopped": [{"issuer": ISSUER_A, "clientId": "stopped-app"}],
        "metered": [{"issuer": ISSUER_B, "clientId": "metered-1"}],
    }
    for name, ids in clients.items():
        put(api, documents.application(name, clientIds=ids))
    put(api, documents.subscription("mobile-shop", application="mobile", api="shop", plan="gold"))
    put(api, documents.subscription("mobile-admin", application="mobile", api="admin", plan="gold"))
    put(api, documents.subscription("partner-shop", application="partner", api="shop", plan="silver"))
    put(api, documents.subscription("metered-shop", application="metered", api="shop", plan="silver"))
    put(api, documents.subscription("stopped-shop", application="stopped", api="shop", state="blocked"))
    put(
        api,
        documents.document(
            "RateLimitPolicy",
            "silver-plan",
            project=PROJECT,
            spec={
                "target": {"kind": "SubscriptionPlan", "name": "silver"},
                "requestsPerUnit": PLAN_LIMIT,
                "unit": "minute",
                "scope": "local",
            },
        ),
    )


@pytest.fixture(scope="module")
def setting(tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer) -> Iterator[Setting]:
    tmp = tmp_path_factory.mktemp("jwt-subscriptions")
    idps = {issuer: IdentityProvider(issuer, AUDIENCE) for issuer in (ISSUER_A, ISSUER_B)}
    with (
        run_upstream("shop") as (port, _),
        run_server(tmp) as server,
        data_plane(tmp, server, "edge", redis_server, enforcer=False) as (agent, _envoy, _),
        server.http() as api,
    ):
        _declare(api, port, idps)
        gateway = Gateway(agent.gateway_port)
        token = idps[ISSUER_A].token(azp="mobile-app")
        gateway.wait_for("/shop/items", status(200), headers={"authorization": f"Bearer {token}"}, timeout=30)
        yield Setting(gateway, api, idps)
        gateway.close()


CASES = [
    ("subscribed by azp", ISSUER_A, {"azp": "mobile-app"}, 200, ("mobile", "gold")),
    ("subscribed by client_id", ISSUER_A, {"client_id": "mobile-app"}, 200, ("mobile", "gold")),
    ("second issuer", ISSUER_B, {"azp": "partner-1"}, 200, ("partner", "silver")),
    ("a client id of another issuer", ISSUER_B, {"azp": "mobile-app"}, 403, None),
    ("not subscribed", ISSUER_A, {"azp": "lonely-app"}, 403, None),
    ("subscription blocked", ISSUER_A, {"azp": "stopped-app"}, 403, None),
    ("unknown client", ISSUER_A, {"azp": "nobody"}, 403, None),
    ("no client id", ISSUER_A, {}, 403, None),
    ("no token", None, {}, 401, None),
]


@pytest.mark.parametrize(("case", "issuer", "claims", "expected", "seen"), CASES, ids=[c[0] for c in CASES])
def test_jwt_callers_are_admitted_by_subscription(
    setting: Setting,
    case: str,
    issuer: str | None,
    claims: dict[str, str],
    expected: int,
    seen: tuple[str, str] | None,
) -> None:
    response = setting.call(issuer, **claims)

    assert response.status_code == expected, (case, response.text)
    if seen is not None:
        headers = response.json()["headers"]
        assert (headers["x-meshplane-application"], headers["x-meshplane-plan"]) == seen


def test_a_caller_cannot_name_its_own_application(setting: Setting) -> None:
    token = setting.idps[ISSUER_A].token(azp="lonely-app")
    forged = {"authorization": f"Bearer {token}", "x-meshplane-application": "mobile", "x-meshplane-plan": "gold"}

    assert setting.gateway.request("GET", "/shop/items", forged).status_code == 403


def test_scopes_and_subscription_are_both_required(setting: Setting) -> None:
    assert setting.call(ISSUER_A, "/admin/items", azp="mobile-app", scope="shop:admin").status_code == 200
    assert setting.call(ISSUER_A, "/admin/items", azp="mobile-app", scope="shop:read").status_code == 403
    assert setting.call(ISSUER_A, "/admin/items", azp="lonely-app", scope="shop:admin").status_code == 403


def test_a_jwt_caller_over_its_plan_limit_gets_429(setting: Setting) -> None:
    # A minute's window: start well inside one, so that every call below shares it.
    if time.time() % 60 > 50:
        time.sleep(61 - time.time() % 60)
    answers = [setting.call(ISSUER_B, azp="metered-1").status_code for _ in range(PLAN_LIMIT + 1)]

    assert answers == [200] * PLAN_LIMIT + [429]
    assert setting.call(ISSUER_B, azp="partner-1").status_code == 200, "each application has its own bucket"


def test_blocking_a_subscription_refuses_the_next_call(setting: Setting) -> None:
    put(setting.api, documents.subscription("mobile-admin", application="mobile", api="admin", state="blocked"))
    headers = {"authorization": f"Bearer {setting.idps[ISSUER_A].token(azp='mobile-app', scope='shop:admin')}"}

    setting.gateway.wait_for("/admin/items", status(403), headers=headers, timeout=15)
