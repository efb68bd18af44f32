"""API management end to end: keys, subscriptions, scopes, limits and CORS through a real gateway.

Real processes on loopback: the server, an agent, Envoy, the enforcer, the rate limiter on a real
Redis, and an upstream that echoes what it received. One table drives the credential cases through the
native path (signed keys, checked by Envoy alone) and the enforcer path (opaque keys).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from meshplane_testing import documents
from meshplane_testing.access_fleet import ISSUER, PROJECT, data_plane, declare, issue
from meshplane_testing.envoy import EnvoyProcess
from meshplane_testing.gateway import Gateway, status
from meshplane_testing.identity import IdentityProvider
from meshplane_testing.meshplane import (
    AgentProcess,
    ServerProcess,
    run_server,
)
from meshplane_testing.north import put
from meshplane_testing.redis import RedisServer
from meshplane_testing.upstream import run_upstream

pytestmark = [pytest.mark.envoy, pytest.mark.timeout(120)]


@dataclass
class Fleet:
    """One cluster's data plane and what the test declared at the server."""

    server: ServerProcess
    agent: AgentProcess
    envoy: EnvoyProcess
    gateway: Gateway
    api: httpx.Client
    keys: dict[str, str]
    idp: IdentityProvider


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer) -> Iterator[Fleet]:
    tmp = tmp_path_factory.mktemp("access")
    idp = IdentityProvider(ISSUER, "orders")
    with (
        run_upstream("orders") as (port, _),
        run_server(tmp) as server,
        data_plane(tmp, server, "edge", redis_server) as (agent, envoy, _),
        server.http() as api,
    ):
        keys = declare(api, port, idp)
        gateway = Gateway(agent.gateway_port)
        for path in ("/signed/items", "/opaque/items"):
            gateway.wait_for(path, status(200), headers={"x-api-key": keys["good"]}, timeout=30)
        gateway.wait_for("/signed/items", status(401), headers={"x-api-key": keys["revoked"]})
        time.sleep(1.2)  # the short-lived key has run out by now
        yield Fleet(server, agent, envoy, gateway, api, keys, idp)
        gateway.close()


CREDENTIAL_CASES = [
    ("no key", None, 401),
    ("unknown key", "unknown", 401),
    ("forged key", "forged", 401),
    ("expired key", "expired", 401),
    ("revoked key", "revoked", 401),
    ("not subscribed", "lonely", 403),
    ("subscription blocked", "blocked", 403),
    ("subscribed", "good", 200),
]


@pytest.mark.parametrize("path", ["/signed/items", "/opaque/items"], ids=["native", "enforcer"])
@pytest.mark.parametrize(("case", "role", "expected"), CREDENTIAL_CASES, ids=[c[0] for c in CREDENTIAL_CASES])
def test_credentials(fleet: Fleet, path: str, case: str, role: str | None, expected: int) -> None:
    headers = {"x-api-key": fleet.keys[role]} if role else {}
    response = fleet.gateway.request("GET", path, headers)

    assert response.status_code == expected, (case, response.text)
    if expected == 200:
        seen = response.json()["headers"]
        assert (seen["x-meshplane-application"], seen["x-meshplane-plan"]) == ("good", "gold")
        assert "x-api-key" not in seen, "the credential must not reach the upstream"


def test_an_opaque_key_works_from_the_query_and_never_reaches_the_upstream(fleet: Fleet) -> None:
    response = fleet.gateway.request("GET", f"/opaque/items?key={fleet.keys['imported']}")

    assert response.status_code == 200, response.text
    assert fleet.keys["imported"] not in json.dumps(response.json())


def test_identity_headers_sent_by_a_caller_are_not_believed(fleet: Fleet) -> None:
    forged = {"x-api-key": fleet.keys["lonely"], "x-meshplane-application": "good", "x-meshplane-plan": "gold"}

    assert fleet.gateway.request("GET", "/signed/items", forged).status_code == 403


USER_CASES = [
    ("valid token", "GET", "/users/me", {}, 200),
    ("scope present", "POST", "/users/orders", {"scope": "orders:read orders:write"}, 200),
    ("scope as a list", "POST", "/users/orders", {"scope": ["orders:write"]}, 200),
    ("scope missing", "POST", "/users/orders", {"scope": "orders:read"}, 403),
    ("expired", "GET", "/users/me", {"exp": 1_000_000}, 401),
    ("wrong issuer", "GET", "/users/me", {"iss": "https://evil.test"}, 401),
    ("wrong audience", "GET", "/users/me", {"aud": "billing"}, 403),  # a good token, for another audience
    ("bad signature", "GET", "/users/me", {"forge": True}, 401),
    ("no token", "GET", "/users/me", None, 401),
]


@pytest.mark.parametrize(("case", "method", "path", "claims", "expected"), USER_CASES, ids=[c[0] for c in USER_CASES])
def test_user_tokens(fleet: Fleet, case: str, method: str, path: str, claims: dict | None, expected: int) -> None:
    headers = {}
    if claims is not None:
        claims = dict(claims)
        key = ec.generate_private_key(ec.SECP256R1()) if claims.pop("forge", False) else None
        headers["authorization"] = f"Bearer {fleet.idp.token(key, **claims)}"
    response = fleet.gateway.wait_for(path, lambda r: r.status_code != 404, method=method, headers=headers)

    assert response.status_code == expected, (case, response.text)


@pytest.mark.parametrize("path", ["/limited/x", "/local/x"], ids=["global", "local"])
def test_a_limit_lets_n_through_then_429_with_headers_then_the_next_window(fleet: Fleet, path: str) -> None:
    # Start at the beginning of a second, so that the four calls share one window.
    time.sleep(1 - time.time() % 1 + 0.02)
    answers = [fleet.gateway.request("GET", path) for _ in range(4)]

    assert [a.status_code for a in answers] == [200, 200, 200, 429], [a.text for a in answers]
    over = answers[-1].headers
    assert over["x-ratelimit-limit"].split(",")[0] == "3"
    assert over["x-ratelimit-remaining"] == "0"
    assert 0 <= int(over["x-ratelimit-reset"]) <= 1
    time.sleep(1.1)
    assert fleet.gateway.request("GET", path).status_code == 200


def test_cors_preflights_follow_the_apis_policy(fleet: Fleet) -> None:
    asked = {"origin": "https://app.example", "access-control-request-method": "GET"}
    allowed = fleet.gateway.request("OPTIONS", "/cors/items", asked)
    other = fleet.gateway.request("OPTIONS", "/cors/items", {**asked, "origin": "https://evil.example"})
    actual = fleet.gateway.request(
        "GET", "/cors/items", {"origin": "https://app.example", "x-api-key": fleet.keys["good"]}
    )

    assert allowed.status_code == 200, allowed.text
    assert allowed.headers["access-control-allow-origin"] == "https://app.example"
    assert allowed.headers["access-control-max-age"] == "600"
    assert "access-control-allow-origin" not in other.headers
    assert actual.status_code == 200
    assert actual.headers["access-control-allow-origin"] == "https://app.example"


def test_a_revoked_key_stops_working_within_one_push(fleet: Fleet) -> None:
    fresh = issue(fleet.api, "good")
    headers = {"x-api-key": fresh["key"]}
    fleet.gateway.wait_for("/signed/items", status(200), headers=headers)

    fleet.api.delete(f"/v1/projects/{PROJECT}/applications/good/keys/{fresh['id']}")

    fleet.gateway.wait_for("/signed/items", status(401), headers=headers, timeout=10)
    fleet.gateway.wait_for("/opaque/items", status(401), headers=headers, timeout=10)


def test_a_rotated_key_works_beside_its_successor_until_the_overlap_ends(fleet: Fleet) -> None:
    old = issue(fleet.api, "good")
    fleet.gateway.wait_for("/signed/items", status(200), headers={"x-api-key": old["key"]})

    rotated = fleet.api.post(
        f"/v1/projects/{PROJECT}/applications/good/keys/{old['id']}/rotate", json={"overlap": "2s"}
    )

    assert rotated.status_code == 201, rotated.text
    new = rotated.json()
    fleet.gateway.wait_for("/signed/items", status(200), headers={"x-api-key": new["key"]})
    assert fleet.gateway.request("GET", "/signed/items", {"x-api-key": old["key"]}).status_code == 200
    fleet.gateway.wait_for("/signed/items", status(401), headers={"x-api-key": old["key"]}, timeout=10)
    assert fleet.gateway.request("GET", "/signed/items", {"x-api-key": new["key"]}).status_code == 200


def test_keys_issued_before_a_signing_key_rotation_keep_working(fleet: Fleet) -> None:
    rotated = fleet.api.post("/v1/signing-keys/rotate")
    assert rotated.status_code == 201, rotated.text
    new = issue(fleet.api, "good")

    assert jwt.get_unverified_header(new["key"])["kid"] == rotated.json()["kid"]
    fleet.gateway.wait_for("/signed/items", status(200), headers={"x-api-key": new["key"]})
    assert fleet.gateway.request("GET", "/signed/items", {"x-api-key": fleet.keys["good"]}).status_code == 200


def test_no_key_material_reaches_envoy(fleet: Fleet) -> None:
    dump = json.dumps(fleet.envoy.config_dump())
    key_set = fleet.api.get("/v1/keysets/api-keys").json()

    for role in ("good", "imported", "lonely", "blocked", "revoked"):
        assert fleet.keys[role] not in dump
        assert fleet.keys[role].split(".")[-1] not in dump
    assert all("d" not in jwk for jwk in key_set["spec"]["keys"]), "only public keys leave the server"
    digests = [hashlib.sha256(fleet.keys[role].encode()).hexdigest() for role in ("good", "imported")]
    assert all(digest not in dump for digest in digests)
    listed = fleet.api.get(f"/v1/projects/{PROJECT}/applications/good/keys").json()["items"]
    assert listed and all(
        set(item) == {"id", "application", "created", "expires", "revoked", "kind"} for item in listed
    )


# Failure modes: each on a data plane of its own, since they stop parts of it.


@pytest.fixture
def orders_port() -> Iterator[int]:
    with run_upstream("orders") as (port, _):
        yield port


def test_enforcer_down_fails_closed_and_the_native_path_carries_on(
    tmp_path: Path, orders_port: int, redis_server: RedisServer
) -> None:
    idp = IdentityProvider(ISSUER, "orders")
    with (
        run_server(tmp_path) as server,
        data_plane(tmp_path, server, "edge", None, limiter=False) as (agent, _, services),
        server.http() as api,
    ):
        keys = declare(api, orders_port, idp)
        gateway = Gateway(agent.gateway_port)
        for path in ("/signed/items", "/opaque/items"):
            gateway.wait_for(path, status(200), headers={"x-api-key": keys["good"]}, timeout=30)

        services["enforcer"].process.stop()

        gateway.wait_for("/opaque/items", status(503), headers={"x-api-key": keys["good"]})
        assert gateway.request("GET", "/opaque/items", {"x-api-key": keys["unknown"]}).status_code == 503
        assert gateway.request("GET", "/signed/items", {"x-api-key": keys["good"]}).status_code == 200


def test_limiter_down_lets_traffic_through_and_local_limits_hold_without_one(
    tmp_path: Path, orders_port: int, redis_server: RedisServer
) -> None:
    with (
        run_server(tmp_path) as server,
        data_plane(tmp_path, server, "edge", redis_server, enforcer=False) as (agent, _, services),
        server.http() as api,
    ):
        put(
            api,
            documents.api(
                "limited",
                basePath="/limited",
                backends=[documents.backend(orders_port)],
                rateLimit={"requestsPerUnit": 2, "unit": "minute", "scope": "global"},
            ),
        )
        put(
            api,
            documents.api(
                "local",
                basePath="/local",
                backends=[documents.backend(orders_port)],
                rateLimit={"requestsPerUnit": 2, "unit": "minute"},
            ),
        )
        gateway = Gateway(agent.gateway_port)
        gateway.wait_for("/limited/x", status(429), timeout=30)

        services["ratelimiter"].process.stop()

        answers = [gateway.request("GET", "/limited/x").status_code for _ in range(5)]
        assert answers == [200] * 5
        gateway.wait_for("/local/x", status(429))


def test_two_limiters_behind_two_gateways_share_one_count_in_redis(
    tmp_path: Path, orders_port: int, redis_server: RedisServer
) -> None:
    with (
        run_server(tmp_path) as server,
        data_plane(tmp_path, server, "edge-a", redis_server, enforcer=False) as (agent_a, _, _),
        data_plane(tmp_path, server, "edge-b", redis_server, enforcer=False) as (agent_b, _, _),
        server.http() as api,
    ):
        limit = {"requestsPerUnit": 4, "unit": "minute", "scope": "global"}
        put(
            api,
            documents.api("shared", basePath="/shared", backends=[documents.backend(orders_port)], rateLimit=limit),
        )
        a, b = Gateway(agent_a.gateway_port), Gateway(agent_b.gateway_port)
        # Both gateways must hold the limit before the count starts; probing costs one call each.
        a.wait_for("/shared/x", lambda r: r.status_code == 200 and "x-ratelimit-limit" in r.headers, timeout=30)
        b.wait_for("/shared/x", lambda r: r.status_code == 200 and "x-ratelimit-limit" in r.headers, timeout=30)

        answers = [a.request("GET", "/shared/x").status_code, b.request("GET", "/shared/x").status_code]
        answers += [a.request("GET", "/shared/x").status_code, b.request("GET", "/shared/x").status_code]

        assert answers == [200, 200, 429, 429]


def test_the_agent_shows_what_it_serves_its_enforcer_and_rate_limiter(fleet: Fleet) -> None:
    dump = httpx.get(f"http://{fleet.agent.admin_address}/config_dump", timeout=10).json()

    served = {entry["typeUrl"].rsplit(".", 1)[-1]: entry["resources"] for entry in dump["enforcers"]}
    assert [r["name"] for r in served["EnforcerApi"]] == [f"{PROJECT}/opaque"]
    assert {f"{PROJECT}/good", f"{PROJECT}/lonely", f"{PROJECT}/blocked"} <= {
        r["name"] for r in served["EnforcerApplication"]
    }
    [limits] = dump["ratelimiters"]
    [config] = limits["resources"]
    assert config["resource"]["domain"] == "meshplane"
    assert f"{PROJECT}/limited" in {d["value"] for d in config["resource"]["descriptors"]}
