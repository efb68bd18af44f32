"""Several policies limiting one plan all apply: the strictest wins per scope, local and global alike.

Real processes on loopback: the server, an agent with its rate limiter on a real Redis, one Envoy, an
upstream. Each row is its own API, plan and policies, so rows keep apart in one fleet.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from meshplane_testing import documents
from meshplane_testing.access_fleet import data_plane, issue
from meshplane_testing.gateway import Gateway, status
from meshplane_testing.meshplane import run_server
from meshplane_testing.north import put
from meshplane_testing.redis import RedisServer
from meshplane_testing.upstream import run_upstream

pytestmark = [pytest.mark.envoy, pytest.mark.timeout(90)]


def limit(requests: int, scope: str) -> dict[str, Any]:
    return {"requestsPerUnit": requests, "unit": "hour", "scope": scope}


# Policies are named so the loosest sorts first: taking the first one found is not enough.
ROWS = {
    "two local": [("a-loose", limit(100, "local")), ("b-strict", limit(3, "local"))],
    "two global": [("a-loose", limit(100, "global")), ("b-strict", limit(3, "global"))],
    "local and global": [("a-local", limit(5, "local")), ("b-global", limit(3, "global"))],
    "global and local": [("a-global", limit(5, "global")), ("b-local", limit(3, "local"))],
}


@dataclass
class Fleet:
    gateway: Gateway
    api: httpx.Client
    key: str


def _name(row: str) -> str:
    return row.replace(" ", "-")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer) -> Iterator[Fleet]:
    tmp = tmp_path_factory.mktemp("plans")
    signed = {"apiKey": {"header": "x-api-key"}}
    with (
        run_upstream("plans") as (port, _),
        run_server(tmp) as server,
        data_plane(tmp, server, "edge", redis_server, enforcer=False) as (agent, _, _),
        server.http() as api,
    ):
        put(api, documents.application("good"))
        for row, policies in ROWS.items():
            name = _name(row)
            put(api, documents.api(name, backends=[documents.backend(port)], authentication=signed))
            put(api, documents.subscription(f"good-{name}", application="good", api=name, plan=name))
            for policy, spec in policies:
                target = {"kind": "SubscriptionPlan", "name": name, "api": name}
                put(api, documents.rate_limit_policy(f"{name}-{policy}", target=target, **spec))
        key = issue(api, "good")["key"]
        gateway = Gateway(agent.gateway_port)
        yield Fleet(gateway, api, key)
        gateway.close()


@pytest.mark.parametrize("row", list(ROWS))
def test_the_strictest_of_a_plans_policies_holds(fleet: Fleet, row: str) -> None:
    path, headers = f"/{_name(row)}/x", {"x-api-key": fleet.key}
    fleet.gateway.wait_for(path, lambda r: r.status_code != 404, headers=headers, timeout=30)
    time.sleep(1)  # the rate limiter has the limits too by now
    # Global counts are per window of the unit (an hour, from the top of the hour): keep the calls in one.
    if time.time() % 3600 > 3600 - 15:
        time.sleep(3601 - time.time() % 3600)
    answers = [fleet.gateway.request("GET", path, headers).status_code for _ in range(8)]

    # The wait may have spent one of the three; the looser limits would let all eight through.
    allowed = answers.count(200)
    assert 2 <= allowed <= 3, answers
    assert answers == [200] * allowed + [429] * (8 - allowed), answers


def test_a_new_subscriber_to_a_locally_limited_plan_gets_its_own_bucket_and_resets_no_one(fleet: Fleet) -> None:
    path, name = "/two-local/x", "two-local"
    fleet.gateway.wait_for(path, status(429), headers={"x-api-key": fleet.key}, timeout=30)  # spent

    put(fleet.api, documents.application("second"))
    put(fleet.api, documents.subscription(f"second-{name}", application="second", api=name, plan=name))
    second = {"x-api-key": issue(fleet.api, "second")["key"]}
    fleet.gateway.wait_for(path, status(200), headers=second, timeout=30)
    answers = [fleet.gateway.request("GET", path, second).status_code for _ in range(4)]

    assert answers == [200, 200, 429, 429], answers
    assert fleet.gateway.request("GET", path, {"x-api-key": fleet.key}).status_code == 429, "a bucket started again"
