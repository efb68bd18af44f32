"""Global limits by quota: each gateway enforces the share of a window the rate limiter assigned it, and no
request asks the rate limiter (Envoy's rate_limit_quota filter, RLQS).

Real processes on loopback: the server, two clusters each with an agent (`--global-limits quota`), its rate
limiter and one Envoy, both limiters counting in one real Redis, and an upstream.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from meshplane_testing import documents
from meshplane_testing.access_fleet import data_plane, issue
from meshplane_testing.envoy import EnvoyProcess
from meshplane_testing.eventually import eventually
from meshplane_testing.gateway import Gateway, status
from meshplane_testing.meshplane import run_ratelimiter, run_server
from meshplane_testing.north import put
from meshplane_testing.redis import RedisServer
from meshplane_testing.upstream import run_upstream

pytestmark = [pytest.mark.envoy, pytest.mark.timeout(120)]

PER_MINUTE = {"unit": "minute", "scope": "global"}


@dataclass
class Fleet:
    api: httpx.Client
    gateways: list[Gateway]
    envoys: list[EnvoyProcess]
    upstream: int


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer) -> Iterator[Fleet]:
    tmp = tmp_path_factory.mktemp("quota")
    with (
        run_upstream("quota") as (port, _),
        run_server(tmp) as server,
        data_plane(tmp, server, "east", redis_server, enforcer=False, global_limits="quota") as (east, east_envoy, _),
        data_plane(tmp, server, "west", redis_server, enforcer=False, global_limits="quota") as (west, west_envoy, _),
        server.http() as api,
    ):
        gateways = [Gateway(east.gateway_port), Gateway(west.gateway_port)]
        yield Fleet(api, gateways, [east_envoy, west_envoy], port)
        for gateway in gateways:
            gateway.close()


def in_one_minute() -> None:
    """Keep what follows inside one minute's window: the counts start again at the top of the minute."""
    if time.time() % 60 > 45:
        time.sleep(60.5 - time.time() % 60)


def answers(gateway: Gateway, path: str, count: int) -> list[int]:
    return [gateway.request("GET", path).status_code for _ in range(count)]


def test_an_api_limit_lets_its_requests_through_then_429_without_asking_per_request(fleet: Fleet) -> None:
    put(
        fleet.api,
        documents.api(
            "whole", backends=[documents.backend(fleet.upstream)], rateLimit={"requestsPerUnit": 5, **PER_MINUTE}
        ),
    )
    gateway = fleet.gateways[0]
    in_one_minute()
    gateway.wait_for("/whole/x", status(200), timeout=30)  # the first: before any grant, counted against the window
    time.sleep(1.0)  # its grant arrives (a round trip; what passes before it is overshoot)

    seen = answers(gateway, "/whole/x", 8)

    assert seen == [200] * 4 + [429] * 4, seen
    code, stats = fleet.envoys[0].admin("/stats?filter=^cluster.meshplane.ratelimiter.upstream_rq_total$")
    assert code == 200
    calls = int(stats.split(": ")[1])
    assert 1 <= calls <= 3, f"{calls} calls to the rate limiter for 9 requests: one quota stream a domain is all"


def test_an_operation_limit_holds_on_its_operation_alone(fleet: Fleet) -> None:
    operations = [
        {"method": "GET", "path": "/items", "rateLimit": {"requestsPerUnit": 3, **PER_MINUTE}},
        {"method": "GET", "path": "/other"},
    ]
    put(fleet.api, documents.api("ops", backends=[documents.backend(fleet.upstream)], operations=operations))
    gateway = fleet.gateways[0]
    in_one_minute()
    gateway.wait_for("/ops/items", status(200), timeout=30)
    time.sleep(1.0)

    assert answers(gateway, "/ops/items", 4) == [200, 200, 429, 429]
    assert answers(gateway, "/ops/other", 4) == [200] * 4


def test_the_answers_of_a_limited_route_say_its_limit_and_a_refusal_that_none_remains(fleet: Fleet) -> None:
    operations = [{"method": "GET", "path": "/items", "rateLimit": {"requestsPerUnit": 2, **PER_MINUTE}}]
    rate = {"requestsPerUnit": 50, **PER_MINUTE}
    backends = [documents.backend(fleet.upstream)]
    put(fleet.api, documents.api("said", backends=backends, rateLimit=rate, operations=operations))
    gateway = fleet.gateways[1]
    in_one_minute()
    gateway.wait_for("/said/items", status(200), timeout=30)
    time.sleep(1.0)

    answered = [gateway.request("GET", "/said/items") for _ in range(3)]

    assert [r.status_code for r in answered] == [200, 429, 429]
    assert all(r.headers["x-ratelimit-limit"] == "2, 2;w=60, 50;w=60" for r in answered)
    assert "x-ratelimit-remaining" not in answered[0].headers
    assert [r.headers["x-ratelimit-remaining"] for r in answered[1:]] == ["0", "0"]


def test_two_gateways_share_one_limit_and_overshoot_by_at_most_their_first_requests(fleet: Fleet) -> None:
    limit = 10
    put(
        fleet.api,
        documents.api(
            "shared", backends=[documents.backend(fleet.upstream)], rateLimit={"requestsPerUnit": limit, **PER_MINUTE}
        ),
    )
    in_one_minute()
    for gateway in fleet.gateways:
        gateway.wait_for("/shared/x", status(200), timeout=30)
    time.sleep(1.0)

    seen = [code for _ in range(10) for gateway in fleet.gateways for code in answers(gateway, "/shared/x", 1)]

    allowed = seen.count(200) + len(fleet.gateways)  # with each gateway's first
    assert limit <= allowed <= limit + len(fleet.gateways), seen
    assert seen.count(429) == len(seen) - seen.count(200)


def test_a_plan_limit_counts_each_caller_by_the_key_it_presented(fleet: Fleet) -> None:
    signed = {"apiKey": {"header": "x-api-key"}}
    put(fleet.api, documents.api("plans", backends=[documents.backend(fleet.upstream)], authentication=signed))
    keys = {}
    for app in ("first", "second"):
        put(fleet.api, documents.application(app))
        put(fleet.api, documents.subscription(f"{app}-plans", application=app, api="plans", plan="metered"))
        keys[app] = {"x-api-key": issue(fleet.api, app)["key"]}
    target = {"kind": "SubscriptionPlan", "name": "metered", "api": "plans"}
    put(fleet.api, documents.rate_limit_policy("metered", target=target, requestsPerUnit=3, **PER_MINUTE))
    gateway = fleet.gateways[0]
    caller = "%DYNAMIC_METADATA(envoy.filters.http.jwt_authn:apikey:sub)%"
    eventually(lambda: caller in json.dumps(fleet.envoys[0].config_dump()), timeout=30, what="the plan's limit")
    in_one_minute()
    for app in keys:
        gateway.wait_for("/plans/x", status(200), headers=keys[app], timeout=30)
    time.sleep(1.0)

    first = [gateway.request("GET", "/plans/x", keys["first"]).status_code for _ in range(4)]
    second = [gateway.request("GET", "/plans/x", keys["second"]).status_code for _ in range(4)]

    assert (first, second) == ([200, 200, 429, 429], [200, 200, 429, 429]), "each caller has its own 3 a minute"
    assert gateway.request("GET", "/plans/x").status_code == 401


def test_a_bucket_header_sent_by_a_client_is_not_believed(fleet: Fleet) -> None:
    put(fleet.api, documents.api("free", backends=[documents.backend(fleet.upstream)]))
    gateway = fleet.gateways[0]
    gateway.wait_for("/free/x", status(200), timeout=30)
    spent = {"x-meshplane-quota-api": "default/whole"}

    seen = [gateway.request("GET", "/free/x", spent) for _ in range(5)]

    assert [r.status_code for r in seen] == [200] * 5
    assert "x-meshplane-quota-api" not in seen[0].json()["headers"]


def test_a_per_second_limit_is_granted_again_each_second(fleet: Fleet) -> None:
    put(
        fleet.api,
        documents.api(
            "brisk",
            backends=[documents.backend(fleet.upstream)],
            rateLimit={"requestsPerUnit": 3, "unit": "second", "scope": "global"},
        ),
    )
    gateway = fleet.gateways[0]
    gateway.wait_for("/brisk/x", status(200), timeout=30)
    time.sleep(1.1)  # a whole window under grants
    begun = time.time()
    stamped = []
    while time.time() - begun < 3.0:
        stamped.append((time.time(), gateway.request("GET", "/brisk/x").status_code))
        time.sleep(0.02)

    allowed = [at for at, code in stamped if code == 200]
    windows = {int(at) for at, _ in stamped}
    assert len(allowed) <= 3 * len(windows), stamped
    # The first and last windows are partly outside the run; every one between has its grant.
    assert {int(at) for at in allowed} >= windows - {min(windows), max(windows)}, "a window went without its grant"
    assert len(stamped) - len(allowed) > len(stamped) // 2, "the limit did not hold"


@pytest.mark.parametrize(("mode", "expected"), [("open", 200), ("closed", 429)])
def test_the_limiter_away_a_gateway_follows_the_failure_mode_and_its_return_brings_grants_back(
    tmp_path: Path, redis_server: RedisServer, mode: str, expected: int
) -> None:
    with (
        run_upstream("quota") as (port, _),
        run_server(tmp_path) as server,
        data_plane(
            tmp_path, server, "edge", redis_server, enforcer=False, global_limits="quota", failure_mode=mode
        ) as (agent, _, services),
        server.http() as api,
    ):
        limit = {"requestsPerUnit": 2, "unit": "second", "scope": "global"}
        put(api, documents.api("spent", backends=[documents.backend(port)], rateLimit=limit))
        gateway = Gateway(agent.gateway_port)
        gateway.wait_for("/spent/x", status(429), timeout=30)
        limiter = services["ratelimiter"]

        limiter.process.stop()

        # Its last grant runs out 2 s past its window (what tokens it has left are spent meanwhile); then the
        # failure mode holds, for every request.
        def failure_mode_holds() -> bool:
            return [gateway.request("GET", "/spent/x").status_code for _ in range(5)] == [expected] * 5

        eventually(failure_mode_holds, timeout=10, what=f"the failure mode ({mode})")
        with run_ratelimiter(tmp_path, agent.xds_port, redis_server.url, name="ratelimiter-back", port=limiter.port):
            # Envoy opens the stream again at its next report (5 s): grants, and the limit, are back.
            def granted_and_limited() -> bool:
                burst = {gateway.request("GET", "/spent/x").status_code for _ in range(8)}
                return burst == {200, 429}

            eventually(granted_and_limited, timeout=20, what="grants and the limit back")
        gateway.close()


def test_gateways_of_two_clusters_each_get_a_part_of_every_window_once_both_asked(fleet: Fleet) -> None:
    limit = {"requestsPerUnit": 20, "unit": "second", "scope": "global"}
    put(fleet.api, documents.api("fair", backends=[documents.backend(fleet.upstream)], rateLimit=limit))
    for gateway in fleet.gateways:
        gateway.wait_for("/fair/x", status(200), timeout=30)
    begun = time.time()
    stamped = []
    while time.time() - begun < 12.0:
        for index, gateway in enumerate(fleet.gateways):
            stamped.append((int(time.time()), index, gateway.request("GET", "/fair/x").status_code))

    # Each gateway reports its demand every 5 s, at its own phase: from 6 s on both have, and the windows
    # whole from then on are shared.
    whole = sorted({at for at, _, _ in stamped if at >= begun + 6})[1:-1]
    assert len(whole) >= 3, whole
    for window in whole:
        allowed = [index for at, index, code in stamped if at == window and code == 200]
        assert set(allowed) == {0, 1}, f"window {window}: let through by {allowed} alone"
        assert len(allowed) <= 20 + 1, f"window {window}: {len(allowed)} let through"
