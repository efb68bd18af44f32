"""Opaque API keys checked inside Envoy by the keys filter (dataplane/keys-filter), with no enforcer running.

Real processes on loopback: the server, an agent given the filter's .wasm and no enforcer, Envoy, the rate
limiter on a real Redis, and an upstream that echoes what it received. The same cases as the enforcer's
(tests/e2e/test_access.py) must come out the same, and per-caller limits must still see the caller.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from meshplane_testing import documents
from meshplane_testing.access_fleet import ISSUER, PROJECT, data_plane, declare, issue
from meshplane_testing.envoy import EnvoyProcess
from meshplane_testing.gateway import Gateway, status
from meshplane_testing.identity import IdentityProvider
from meshplane_testing.keys_filter import keys_filter_wasm
from meshplane_testing.meshplane import run_server
from meshplane_testing.north import put
from meshplane_testing.redis import RedisServer
from meshplane_testing.upstream import run_upstream

pytestmark = [pytest.mark.envoy, pytest.mark.timeout(120)]

OPAQUE = {"apiKey": {"mode": "opaque", "header": "x-api-key", "query": "key"}}
PLAN_LIMITS = {"local": 3, "global": 2}
"""Requests an hour each caller of the `metered-<scope>` plan may make, per scope."""


@dataclass
class Fleet:
    envoy: EnvoyProcess
    gateway: Gateway
    api: httpx.Client
    keys: dict[str, str]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer) -> Iterator[Fleet]:
    wasm = keys_filter_wasm()
    tmp = tmp_path_factory.mktemp("keys-filter")
    with (
        run_upstream("orders") as (port, _),
        run_server(tmp) as server,
        data_plane(tmp, server, "edge", redis_server, enforcer=False, keys_filter=wasm) as (_agent, envoy, _),
        server.http() as api,
    ):
        keys = declare(api, port, IdentityProvider(ISSUER, "orders"))
        for scope, requests in PLAN_LIMITS.items():
            name = f"metered-{scope}"
            put(api, documents.api(name, backends=[documents.backend(port)], authentication=OPAQUE))
            put(api, documents.subscription(f"good-{name}", application="good", api=name, plan=name))
            target = {"kind": "SubscriptionPlan", "name": name, "api": name}
            limit = {"requestsPerUnit": requests, "unit": "hour", "scope": scope}
            put(api, documents.rate_limit_policy(name, target=target, **limit))
        gateway = Gateway(_agent.gateway_port)
        gateway.wait_for("/opaque/items", status(200), headers={"x-api-key": keys["good"]}, timeout=30)
        time.sleep(1.2)  # the short-lived key has run out by now
        yield Fleet(envoy, gateway, api, keys)
        gateway.close()


CREDENTIAL_CASES = [
    ("no key", None, 401, "missing API key"),
    ("unknown key", "unknown", 401, "invalid API key"),
    ("a signed key", "forged", 401, "invalid API key"),
    ("expired key", "expired", 401, "expired API key"),
    ("revoked key", "revoked", 401, "invalid API key"),
    ("not subscribed", "lonely", 403, "not subscribed"),
    ("subscription blocked", "blocked", 403, "subscription blocked"),
]


@pytest.mark.parametrize(("case", "role", "code", "reason"), CREDENTIAL_CASES, ids=[c[0] for c in CREDENTIAL_CASES])
def test_a_refused_key_gets_the_enforcers_answer(
    fleet: Fleet, case: str, role: str | None, code: int, reason: str
) -> None:
    response = fleet.gateway.request("GET", "/opaque/items", {"x-api-key": fleet.keys[role]} if role else {})

    assert response.status_code == code, (case, response.text)
    assert response.json() == {"error": reason}
    assert response.headers["content-type"] == "application/json"
    assert (response.headers.get("www-authenticate") == "APIKey") == (code == 401)


def test_a_subscriber_is_let_in_named_and_without_its_key(fleet: Fleet) -> None:
    forged = {"x-api-key": fleet.keys["good"], "x-meshplane-application": "lonely", "x-meshplane-plan": "free"}
    response = fleet.gateway.request("GET", "/opaque/items", forged)

    assert response.status_code == 200, response.text
    seen = response.json()["headers"]
    assert (seen["x-meshplane-application"], seen["x-meshplane-plan"]) == ("good", "gold")
    assert seen["x-meshplane-key-id"]
    assert "x-api-key" not in seen, "the credential must not reach the upstream"


def test_a_key_from_the_query_is_taken_off_and_the_rest_of_the_query_kept(fleet: Fleet) -> None:
    response = fleet.gateway.request("GET", f"/opaque/items?a=1&key={fleet.keys['imported']}&b=%20")

    assert response.status_code == 200, response.text
    assert fleet.keys["imported"] not in json.dumps(response.json())
    assert response.json()["path"] == "/items?a=1&b=%20"  # the basePath is the gateway's


def test_forged_identity_headers_do_not_let_a_non_subscriber_in(fleet: Fleet) -> None:
    forged = {"x-api-key": fleet.keys["lonely"], "x-meshplane-application": "good", "x-meshplane-plan": "gold"}

    assert fleet.gateway.request("GET", "/opaque/items", forged).status_code == 403


def test_a_new_key_works_and_a_revoked_one_stops_within_one_push(fleet: Fleet) -> None:
    fresh = issue(fleet.api, "good")
    headers = {"x-api-key": fresh["key"]}
    fleet.gateway.wait_for("/opaque/items", status(200), headers=headers, timeout=10)

    fleet.api.delete(f"/v1/projects/{PROJECT}/applications/good/keys/{fresh['id']}")

    fleet.gateway.wait_for("/opaque/items", status(401), headers=headers, timeout=10)
    assert fleet.gateway.request("GET", "/opaque/items", {"x-api-key": fleet.keys["good"]}).status_code == 200


def test_a_blocked_subscription_is_refused_within_one_push(fleet: Fleet) -> None:
    put(fleet.api, documents.application("turncoat"))
    put(fleet.api, documents.subscription("turncoat-opaque", application="turncoat", api="opaque", plan="gold"))
    headers = {"x-api-key": issue(fleet.api, "turncoat")["key"]}
    fleet.gateway.wait_for("/opaque/items", status(200), headers=headers, timeout=10)

    put(fleet.api, documents.subscription("turncoat-opaque", application="turncoat", api="opaque", state="blocked"))

    fleet.gateway.wait_for("/opaque/items", status(403), headers=headers, timeout=10)


@pytest.mark.parametrize("scope", list(PLAN_LIMITS))
def test_a_plan_limit_counts_each_caller_the_filter_names(fleet: Fleet, scope: str) -> None:
    path, headers = f"/metered-{scope}/x", {"x-api-key": fleet.keys["good"]}
    fleet.gateway.wait_for(path, lambda r: r.status_code != 404, headers=headers, timeout=30)
    time.sleep(1)  # the rate limiter has the limits too by now
    if time.time() % 3600 > 3600 - 15:  # global counts are per hour from the top of the hour: keep in one
        time.sleep(3601 - time.time() % 3600)
    answers = [fleet.gateway.request("GET", path, headers).status_code for _ in range(6)]

    allowed = answers.count(200)
    assert PLAN_LIMITS[scope] - 1 <= allowed <= PLAN_LIMITS[scope], answers  # the wait may have spent one
    assert answers == [200] * allowed + [429] * (6 - allowed), answers


def test_envoy_holds_digests_only_and_counts_its_decisions(fleet: Fleet) -> None:
    dump = json.dumps(fleet.envoy.config_dump())

    for role in ("good", "imported", "lonely", "blocked"):
        assert fleet.keys[role] not in dump, "a key reached the gateway"
        assert hashlib.sha256(fleet.keys[role].encode()).hexdigest() in dump, "the gateway lacks a key's digest"
    asked = ["type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz", "meshplane.enforcer"]
    assert not [found for found in asked if found in dump], "the enforcer is asked although the gateway checks keys"
    code, stats = fleet.envoy.admin("/stats?filter=meshplane_keys")
    assert code == 200
    counted = dict(line.split(": ") for line in stats.strip().splitlines())
    assert int(counted["wasmcustom.meshplane_keys_allowed"]) > 0, stats
    assert int(counted["wasmcustom.meshplane_keys_missing_key"]) > 0, stats
