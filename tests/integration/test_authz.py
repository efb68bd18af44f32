"""North-API security in process: every role x action x project cell, OIDC users, the failure brake,
request limits. The expectations are written out here, apart from the code that enforces them."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from meshplane.model.roles import Role
from meshplane.server.app import create_app
from meshplane.server.auth.guard import Authenticator, FailureBrake
from meshplane.server.auth.oidc import OidcSettings, OidcVerifier
from meshplane.server.auth.tokens import TokenService
from meshplane.server.signing import SigningKeys, publish_key_set
from meshplane.store.store import Store
from meshplane_testing import documents

pytestmark = pytest.mark.timeout(120)

ROLES = ["admin", "publisher", "subscriber", "viewer"]
SCOPES = [None, "shop"]
"""A token covers every project (None) or project `shop`."""
PROJECTS = ["shop", "other"]
WRITER = {
    "API": "publisher",
    "RateLimitPolicy": "publisher",
    "LogicalCloud": "publisher",
    "Application": "subscriber",
    "Subscription": "subscriber",
}
PLURAL = {
    "API": "apis",
    "RateLimitPolicy": "ratelimitpolicies",
    "LogicalCloud": "logicalclouds",
    "Application": "applications",
    "Subscription": "subscriptions",
}
IDP_ISSUER = "https://idp.test"


def spec(kind: str, project: str) -> dict[str, Any]:
    """A valid spec of each kind, given the seed objects below (distinct routes per project)."""
    return {
        "API": {"basePath": f"/{project}-cells", "backends": [{"host": "127.0.0.1", "port": 9001}]},
        "RateLimitPolicy": {"target": {"kind": "API", "name": "seed"}, "requestsPerUnit": 5, "unit": "minute"},
        "LogicalCloud": {"clusters": [{"name": "edge-1", "namespace": project}]},
        "Application": {"description": "a cell"},
        "Subscription": {"application": "seed", "api": "cells", "plan": "gold"},
    }[kind]


def body(kind: str, name: str, project: str) -> dict[str, Any]:
    return documents.document(kind, name, project=project, spec=spec(kind, project))


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    """A server holding projects shop and other with seed objects, and a token per role x scope."""
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'meshplane.db'}")
    tokens = TokenService(store)
    signing = SigningKeys(tmp_path / "signing")
    await publish_key_set(store, signing)
    app = create_app(
        store, authenticator=Authenticator(tokens, brake=FailureBrake(limit=5)), tokens=tokens, signing=signing
    )
    issued = {}
    for role in ROLES:
        for scope in SCOPES:
            if role == "admin" and scope is not None:
                continue
            issued[(role, scope)] = (await tokens.issue(f"{role}-{scope}", Role(role), scope))[1]
    transport = httpx.ASGITransport(app=app, client=("10.0.0.1", 1234))
    async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=10) as http:
        admin = {"Authorization": f"Bearer {issued[('admin', None)]}"}
        for project in PROJECTS:
            created = await http.post(
                "/v1/projects", json={"kind": "Project", "metadata": {"name": project}, "spec": {}}, headers=admin
            )
            assert created.status_code == 201, created.text
            seeds = [
                ("applications", body("Application", "seed", project)),
                (
                    "apis",
                    {**body("API", "seed", project), "spec": {**spec("API", project), "basePath": f"/{project}-seed"}},
                ),
                (
                    "apis",
                    {**body("API", "cells", project), "spec": {**spec("API", project), "basePath": f"/{project}-c"}},
                ),
            ]
            for plural, doc in seeds:
                response = await http.put(
                    f"/v1/projects/{project}/{plural}/{doc['metadata']['name']}", json=doc, headers=admin
                )
                assert response.status_code in (200, 201), response.text
        yield {"http": http, "tokens": issued, "service": tokens}
    await store.close()


def headers(world: dict[str, Any], role: str, scope: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {world['tokens'][(role, scope)]}"}


PRINCIPALS = [(role, scope) for role in ROLES for scope in SCOPES if not (role == "admin" and scope is not None)]


def expected_write(role: str, scope: str | None, kind: str, project: str) -> int:
    if scope is not None and scope != project:
        return 404
    return 200 if role in ("admin", WRITER[kind]) else 403


@pytest.mark.parametrize(("role", "scope"), PRINCIPALS)
async def test_every_role_scope_kind_and_project(world: dict[str, Any], role: str, scope: str | None) -> None:
    http, auth = world["http"], headers(world, role, scope)
    for project in PROJECTS:
        for kind, plural in PLURAL.items():
            name = "cell"
            url = f"/v1/projects/{project}/{plural}/{name}"
            write = await http.put(url, json=body(kind, name, project), headers=auth)
            want = expected_write(role, scope, kind, project)
            assert (write.status_code if write.status_code != 201 else 200) == want, (kind, project, write.text)
            read = await http.get(f"/v1/projects/{project}/{plural}", headers=auth)
            assert read.status_code == (404 if scope not in (None, project) else 200), (kind, project)
            if want == 200:
                assert (await http.delete(url, headers=auth)).status_code == 200
            elif want == 403:
                assert (await http.delete(url, headers=auth)).status_code in (403, 404)


@pytest.mark.parametrize(("role", "scope"), PRINCIPALS)
async def test_fleet_wide_objects_and_projects_of_others(world: dict[str, Any], role: str, scope: str | None) -> None:
    http, auth = world["http"], headers(world, role, scope)
    fleet_admin = role == "admin"

    project = await http.put(
        "/v1/projects/third", json={"kind": "Project", "metadata": {"name": "third"}, "spec": {}}, headers=auth
    )
    cluster = await http.put(
        "/v1/clusters/edge-9", json={"kind": "Cluster", "metadata": {"name": "edge-9"}, "spec": {}}, headers=auth
    )
    listed = await http.get("/v1/projects", headers=auth)
    other = await http.get("/v1/projects/other", headers=auth)
    clusters = await http.get("/v1/clusters", headers=auth)
    tokens = await http.get("/v1/tokens", headers=auth)

    assert project.status_code in ((200, 201) if fleet_admin else (403,)), project.text
    assert cluster.status_code in ((200, 201) if fleet_admin else (403,)), cluster.text
    names = {item["metadata"]["name"] for item in listed.json()["items"]}
    assert names == {"shop"} if scope else names >= {"shop", "other"}
    assert other.status_code == (404 if scope else 200)
    assert clusters.status_code == 200
    assert tokens.status_code == (200 if fleet_admin else 403)


@pytest.mark.parametrize(("role", "scope"), PRINCIPALS)
async def test_keys_are_subscribers_business(world: dict[str, Any], role: str, scope: str | None) -> None:
    http, auth = world["http"], headers(world, role, scope)
    for project in PROJECTS:
        issued = await http.post(f"/v1/projects/{project}/applications/seed/keys", json={}, headers=auth)
        listed = await http.get(f"/v1/projects/{project}/applications/seed/keys", headers=auth)
        hidden = scope is not None and scope != project
        assert issued.status_code == (404 if hidden else 201 if role in ("admin", "subscriber") else 403)
        assert listed.status_code == (404 if hidden else 200)
    signing = await http.post("/v1/signing-keys/rotate", headers=auth)
    assert signing.status_code == (201 if role == "admin" else 403)


async def test_a_bound_token_watches_only_its_project(world: dict[str, Any]) -> None:
    http = world["http"]
    other = await http.get("/v1/watch?since=0&project=other", headers=headers(world, "viewer", "shop"))
    assert other.status_code == 404


async def test_no_token_or_a_bad_one_is_401_and_too_many_failures_429(world: dict[str, Any]) -> None:
    http = world["http"]
    missing = await http.get("/v1/projects")
    forged = await http.get("/v1/projects", headers={"Authorization": "Bearer mpt_0000_nope"})
    assert (missing.status_code, forged.status_code) == (401, 401)
    assert missing.headers["www-authenticate"].startswith("Bearer")
    for _ in range(3):
        await http.get("/v1/projects", headers={"Authorization": "Bearer wrong"})
    braked = await http.get("/v1/projects", headers={"Authorization": "Bearer wrong"})
    assert braked.status_code == 429
    assert int(braked.headers["retry-after"]) > 0
    assert (await http.get("/v1/projects", headers=headers(world, "admin", None))).status_code == 200


async def test_revoked_and_expired_tokens_stop_working(world: dict[str, Any]) -> None:
    http, service = world["http"], world["service"]
    admin = headers(world, "admin", None)
    created = await http.post("/v1/tokens", json={"name": "ci", "role": "viewer", "project": "shop"}, headers=admin)
    assert created.status_code == 201, created.text
    token = created.json()["token"]
    assert (await http.get("/v1/whoami", headers={"Authorization": f"Bearer {token}"})).json()["project"] == "shop"
    listed = (await http.get("/v1/tokens", headers=admin)).json()["items"]
    assert all("digest" not in item and "token" not in item for item in listed)

    assert (await http.delete(f"/v1/tokens/{created.json()['id']}", headers=admin)).json()["revoked"] is True
    assert (await http.get("/v1/whoami", headers={"Authorization": f"Bearer {token}"})).status_code == 401
    _, short = await service.issue("short", Role.VIEWER, None, timedelta(seconds=1))
    await asyncio.sleep(1.1)
    assert (await http.get("/v1/whoami", headers={"Authorization": f"Bearer {short}"})).status_code == 401
    assert (
        await http.post("/v1/tokens", json={"name": "x", "role": "admin", "project": "shop"}, headers=admin)
    ).status_code == 422


async def test_request_limits_and_no_cors(world: dict[str, Any]) -> None:
    http = world["http"]
    admin = headers(world, "admin", None)
    huge = await http.post(
        "/v1/projects", content=b"{" + b" " * (2 << 20) + b"}", headers={**admin, "content-type": "application/json"}
    )
    text = await http.post("/v1/projects", content=b"{}", headers={**admin, "content-type": "text/plain"})
    preflight = await http.options(
        "/v1/projects", headers={"origin": "https://evil.example", "access-control-request-method": "GET"}
    )
    assert (huge.status_code, text.status_code) == (413, 415)
    assert "access-control-allow-origin" not in preflight.headers


async def test_oidc_users_get_the_roles_their_claim_names(tmp_path: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    jwk = {**json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key())), "kid": "k1", "alg": "ES256"}
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'meshplane.db'}")
    oidc = OidcVerifier(OidcSettings(issuer=IDP_ISSUER, audience="meshplane", jwks=json.dumps({"keys": [jwk]})))
    app = create_app(store, authenticator=Authenticator(TokenService(store), oidc))

    def user(roles: Any, **claims: Any) -> dict[str, str]:
        now = int(time.time())
        payload = {
            "iss": IDP_ISSUER,
            "aud": "meshplane",
            "sub": "alice",
            "exp": now + 60,
            "meshplane_roles": roles,
            **claims,
        }
        return {"Authorization": f"Bearer {jwt.encode(payload, key, algorithm='ES256', headers={'kid': 'k1'})}"}

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as http:
        assert (await http.get("/v1/whoami", headers=user(["viewer:shop", "publisher:shop"]))).json() == {
            "name": "user alice",
            "role": "publisher",
            "project": "shop",
        }
        assert (await http.get("/v1/whoami", headers=user("admin"))).json()["role"] == "admin"
        assert (await http.get("/v1/whoami", headers=user([]))).status_code == 401
        assert (await http.get("/v1/whoami", headers=user("admin", aud="other"))).status_code == 401
        assert (await http.get("/v1/whoami", headers=user("admin", exp=1))).status_code == 401
        assert (await http.get("/v1/whoami", headers=user("admin", iss="https://evil.test"))).status_code == 401
    await store.close()
