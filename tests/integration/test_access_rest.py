"""API management over the north REST API in process: what subscriptions and policies name must exist, routes
of two APIs must not meet, credential records are read-only, and API keys are shown once and kept as digests."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meshplane.server.app import create_app
from meshplane.server.credentials import Credentials, NewKey
from meshplane.server.objects import CHECK_ATTEMPTS, ObjectService
from meshplane.server.problems import Problem
from meshplane.server.signing import SigningKeys, publish_key_set
from meshplane.store.errors import NotFound, Overtaken
from meshplane.store.store import Store
from meshplane_testing.documents import api, document, rate_limit_policy, subscription
from meshplane_testing.north import north_client

pytestmark = pytest.mark.timeout(60)

SHOP = "/v1/projects/shop"
KEYS = f"{SHOP}/applications/mobile/keys"
KEY_SET = "/v1/keysets/api-keys"


def field_paths(response: httpx.Response) -> set[str]:
    return {error["path"] for error in response.json().get("errors", [])}


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def database_bytes(directory: Path) -> bytes:
    """Every byte SQLite wrote: the database file, its write-ahead log and shared memory."""
    return b"".join(path.read_bytes() for path in directory.glob("meshplane.db*"))


def moment(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.fixture
def signing(tmp_path: Path) -> SigningKeys:
    return SigningKeys(tmp_path / "signing")


@pytest.fixture
async def client(store: Store, signing: SigningKeys) -> AsyncIterator[httpx.AsyncClient]:
    """A server as `meshplane server` assembles it (with the keys endpoints), holding projects `shop` and `other`."""
    await publish_key_set(store, signing)
    async with north_client(create_app(store, signing=signing), ["shop", "other"]) as http:
        yield http


async def put(client: httpx.AsyncClient, plural: str, body: dict[str, Any]) -> httpx.Response:
    project, name = body["metadata"]["project"], body["metadata"]["name"]
    return await client.put(f"/v1/projects/{project}/{plural}/{name}", json=body)


async def given_objects(client: httpx.AsyncClient, *bodies: dict[str, Any]) -> None:
    """Store objects a test builds on; each must be accepted."""
    for body in bodies:
        response = await put(client, body["kind"].lower() + "s", body)
        assert response.status_code in (200, 201), response.text


@pytest.fixture
async def mobile(client: httpx.AsyncClient) -> httpx.AsyncClient:
    """The client, with application `mobile` in `shop`."""
    await given_objects(client, document("Application", "mobile", spec={}, project="shop"))
    return client


async def issue(client: httpx.AsyncClient, body: dict[str, Any] | None = None, url: str = KEYS) -> dict[str, Any]:
    response = await client.post(url, json=body)
    assert response.status_code == 201, response.text
    return response.json()


async def key_set(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    response = await client.get(KEY_SET)
    assert response.status_code == 200, response.text
    return response.json()["spec"]["keys"]


# --- subscriptions and policies name what exists ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("existing", "missing_paths"),
    [
        ({"application"}, {"spec.api"}),
        ({"api"}, {"spec.application"}),
        (set(), {"spec.api", "spec.application"}),
    ],
)
async def test_subscription_naming_a_missing_object_is_refused_with_its_field_path(
    client: httpx.AsyncClient, existing: set[str], missing_paths: set[str]
) -> None:
    if "application" in existing:
        await given_objects(client, document("Application", "mobile", spec={}, project="shop"))
    if "api" in existing:
        await given_objects(client, api("orders", project="shop"))

    response = await put(
        client,
        "subscriptions",
        subscription("mobile-orders", application="mobile", api="orders", plan="default", project="shop"),
    )

    assert response.status_code == 422
    assert field_paths(response) == missing_paths
    assert (await client.get(f"{SHOP}/subscriptions/mobile-orders")).status_code == 404


async def test_an_application_subscribes_to_an_api_once(mobile: httpx.AsyncClient) -> None:
    await given_objects(
        mobile,
        api("orders", project="shop"),
        subscription("first", application="mobile", api="orders", plan="default", project="shop"),
    )

    again = await put(
        mobile, "subscriptions", subscription("second", application="mobile", api="orders", plan="gold", project="shop")
    )
    same = await put(
        mobile, "subscriptions", subscription("first", application="mobile", api="orders", plan="gold", project="shop")
    )

    assert again.status_code == 409
    assert "first" in again.json()["detail"]
    assert same.status_code == 200
    assert same.json()["spec"]["plan"] == "gold"
    assert (await mobile.get(f"{SHOP}/subscriptions/second")).status_code == 404


async def test_of_concurrent_subscriptions_of_one_application_to_one_api_one_is_accepted(
    mobile: httpx.AsyncClient,
) -> None:
    await given_objects(mobile, api("orders", project="shop"))

    responses = await asyncio.gather(
        *(
            put(
                mobile,
                "subscriptions",
                subscription(f"sub-{n}", application="mobile", api="orders", plan="default", project="shop"),
            )
            for n in range(8)
        )
    )

    assert sorted(r.status_code for r in responses) == [201] + [409] * 7
    listed = (await mobile.get(f"{SHOP}/subscriptions")).json()["items"]
    assert len(listed) == 1


async def test_subscriptions_of_one_application_to_different_apis_are_accepted(mobile: httpx.AsyncClient) -> None:
    await given_objects(
        mobile,
        api("orders", project="shop"),
        api("billing", project="shop"),
        subscription("a", application="mobile", api="orders", plan="default", project="shop"),
    )

    response = await put(
        mobile, "subscriptions", subscription("b", application="mobile", api="billing", plan="default", project="shop")
    )

    assert response.status_code == 201, response.text


@pytest.mark.parametrize(
    ("target", "path"),
    [
        ({"kind": "API", "name": "nope"}, "spec.target.name"),
        ({"kind": "Operation", "name": "nope", "operation": {"method": "GET", "path": "/items"}}, "spec.target.name"),
        (
            {"kind": "Operation", "name": "orders", "operation": {"method": "DELETE", "path": "/items"}},
            "spec.target.operation",
        ),
        (
            {"kind": "Operation", "name": "orders", "operation": {"method": "GET", "path": "/other"}},
            "spec.target.operation",
        ),
        ({"kind": "SubscriptionPlan", "name": "gold", "api": "nope"}, "spec.target.api"),
    ],
)
async def test_policy_on_an_unknown_target_is_refused_with_its_field_path(
    client: httpx.AsyncClient, target: dict[str, Any], path: str
) -> None:
    await given_objects(client, api("orders", project="shop", operations=[{"method": "GET", "path": "/items"}]))

    response = await put(
        client,
        "ratelimitpolicies",
        rate_limit_policy("limit", target=target, project="shop", requestsPerUnit=10, unit="minute"),
    )

    assert response.status_code == 422
    assert field_paths(response) == {path}


@pytest.mark.parametrize(
    "target",
    [
        {"kind": "API", "name": "orders", "operation": {"method": "GET", "path": "/items"}},
        {"kind": "Operation", "name": "orders"},
        {"kind": "API", "name": "orders", "api": "orders"},
        {"kind": "Route", "name": "orders"},
        {"kind": "API"},
    ],
)
async def test_policy_target_of_the_wrong_shape_is_refused_with_422(
    client: httpx.AsyncClient, target: dict[str, Any]
) -> None:
    await given_objects(client, api("orders", project="shop", operations=[{"method": "GET", "path": "/items"}]))

    response = await put(
        client,
        "ratelimitpolicies",
        rate_limit_policy("limit", target=target, project="shop", requestsPerUnit=10, unit="minute"),
    )

    assert response.status_code == 422
    assert all(path.startswith("spec.target") for path in field_paths(response))


@pytest.mark.parametrize(
    "target",
    [
        {"kind": "API", "name": "orders"},
        {"kind": "Operation", "name": "orders", "operation": {"method": "get", "path": "/items"}},
        {"kind": "SubscriptionPlan", "name": "gold", "api": "orders"},
        {"kind": "SubscriptionPlan", "name": "gold"},
    ],
)
async def test_policy_on_an_existing_target_is_accepted(client: httpx.AsyncClient, target: dict[str, Any]) -> None:
    await given_objects(client, api("orders", project="shop", operations=[{"method": "GET", "path": "/items"}]))

    response = await put(
        client,
        "ratelimitpolicies",
        rate_limit_policy("limit", target=target, project="shop", requestsPerUnit=10, unit="minute"),
    )

    assert response.status_code == 201, response.text


# --- API validation --------------------------------------------------------------------------------------------

JWT = {"issuer": "https://id.example.com", "jwksUri": "https://id.example.com/jwks"}
INLINE_JWKS = json.dumps({"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "x"}]})


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        ({"operations": [{"method": "GET", "path": "/items", "scopes": ["orders:read"]}]}, "spec.operations[0].scopes"),
        (
            {
                "authentication": {"apiKey": {}},
                "operations": [{"method": "GET", "path": "/items", "scopes": ["orders:read"]}],
            },
            "spec.operations[0].scopes",
        ),
        ({"authentication": {"jwt": {**JWT, "jwks": INLINE_JWKS}}}, "spec.authentication.jwt"),
        ({"authentication": {"jwt": {"issuer": "https://id.example.com"}}}, "spec.authentication.jwt"),
        ({"authentication": {"jwt": JWT, "apiKey": {}}}, "spec.authentication"),
        ({"authentication": {}}, "spec.authentication"),
        ({"authentication": {"jwt": {"issuer": "i", "jwks": "[" * 100_000}}}, "spec.authentication.jwt.jwks"),
        ({"authentication": {"jwt": {"issuer": "i", "jwks": '{"keys": []}'}}}, "spec.authentication.jwt.jwks"),
        (
            {"authentication": {"jwt": {**JWT, "additionalIssuers": [{"issuer": JWT["issuer"], "jwks": INLINE_JWKS}]}}},
            "spec.authentication.jwt",
        ),
        (
            {"authentication": {"jwt": {**JWT, "additionalIssuers": [{"issuer": "https://other.example"}]}}},
            "spec.authentication.jwt.additionalIssuers[0]",
        ),
        ({"authentication": {"jwt": {**JWT, "clientIdClaims": []}}}, "spec.authentication.jwt.clientIdClaims"),
        ({"authentication": {"jwt": {**JWT, "clientIdClaims": ["a b"]}}}, "spec.authentication.jwt.clientIdClaims[0]"),
        ({"cors": {"allowOrigins": ["ftp://app.example.com"]}}, "spec.cors.allowOrigins[0]"),
        ({"cors": {"allowOrigins": ["https://app.example.com/path"]}}, "spec.cors.allowOrigins[0]"),
        ({"cors": {"allowOrigins": []}}, "spec.cors.allowOrigins"),
    ],
)
async def test_api_with_inconsistent_access_settings_is_refused_with_its_field_path(
    client: httpx.AsyncClient, spec: dict[str, Any], path: str
) -> None:
    response = await put(client, "apis", api("orders", project="shop", **spec))

    assert response.status_code == 422
    assert field_paths(response) == {path}


@pytest.mark.parametrize("header", ["x-meshplane-application", "X-Meshplane-Project", ":authority", "bad header"])
async def test_identity_and_pseudo_headers_are_refused_as_key_header(client: httpx.AsyncClient, header: str) -> None:
    response = await put(client, "apis", api("orders", project="shop", authentication={"apiKey": {"header": header}}))

    assert response.status_code == 422
    assert field_paths(response) == {"spec.authentication.apiKey.header"}


async def test_api_with_consistent_access_settings_is_accepted(client: httpx.AsyncClient) -> None:
    spec = {
        "authentication": {"jwt": {**JWT, "audiences": ["orders"]}},
        "operations": [
            {
                "method": "GET",
                "path": "/items",
                "scopes": ["orders:read"],
                "rateLimit": {"requestsPerUnit": 5, "unit": "second"},
            }
        ],
        "cors": {"allowOrigins": ["https://app.example.com", "https://*.example.com:8443"], "maxAge": "1h"},
        "rateLimit": {"requestsPerUnit": 100, "unit": "minute", "scope": "global"},
    }

    response = await put(client, "apis", api("orders", project="shop", **spec))

    assert response.status_code == 201, response.text
    assert response.json()["spec"]["authentication"]["jwt"]["header"] == "authorization"


async def test_an_api_may_accept_tokens_of_several_issuers_and_require_a_subscription(
    client: httpx.AsyncClient,
) -> None:
    other = {"issuer": "https://other.example", "jwks": INLINE_JWKS, "audiences": ["orders"]}
    jwt = {**JWT, "additionalIssuers": [other], "requireSubscription": True}

    response = await put(client, "apis", api("orders", project="shop", authentication={"jwt": jwt}))

    assert response.status_code == 201, response.text
    stored = response.json()["spec"]["authentication"]["jwt"]
    assert stored["additionalIssuers"][0]["issuer"] == "https://other.example"
    assert stored["clientIdClaims"] == ["azp", "client_id"]


async def test_a_token_client_belongs_to_one_application_of_a_project(mobile: httpx.AsyncClient) -> None:
    client = {"issuer": "https://id.example.com", "clientId": "mobile-app"}
    first = await put(
        mobile, "applications", document("Application", "first", project="shop", spec={"clientIds": [client]})
    )
    second = await put(
        mobile, "applications", document("Application", "second", project="shop", spec={"clientIds": [client]})
    )
    other_issuer = await put(
        mobile,
        "applications",
        document(
            "Application", "third", project="shop", spec={"clientIds": [{**client, "issuer": "https://b.example"}]}
        ),
    )
    again = await put(
        mobile, "applications", document("Application", "first", project="shop", spec={"clientIds": [client]})
    )
    twice = await put(
        mobile, "applications", document("Application", "fourth", project="shop", spec={"clientIds": [client, client]})
    )

    assert first.status_code == 201, first.text
    assert second.status_code == 409
    assert "first" in second.json()["detail"]
    assert other_issuer.status_code == 201, other_issuer.text
    assert again.status_code == 200, again.text
    assert twice.status_code == 422
    assert (await mobile.get(f"{SHOP}/applications/second")).status_code == 404


async def test_a_client_certificate_belongs_to_one_application_of_a_project(mobile: httpx.AsyncClient) -> None:
    def app(name: str, *certificates: dict[str, str]) -> dict[str, Any]:
        return document("Application", name, project="shop", spec={"clientCertificates": list(certificates)})

    san = {"san": "spiffe://shop/orders"}
    first = await put(mobile, "applications", app("first", san))
    second = await put(mobile, "applications", app("second", {"subject": "CN=x"}, san))
    same_print = await put(mobile, "applications", app("third", {"fingerprint": "AB" * 32}))
    written_otherwise = await put(mobile, "applications", app("fourth", {"fingerprint": ":".join(["ab"] * 32)}))
    again = await put(mobile, "applications", app("first", san))

    assert first.status_code == 201, first.text
    assert second.status_code == 409 and "first" in second.json()["detail"], second.text
    assert same_print.status_code == 201, same_print.text
    assert written_otherwise.status_code == 409 and "third" in written_otherwise.json()["detail"]
    assert again.status_code == 200, again.text
    assert (await mobile.get(f"{SHOP}/applications/second")).status_code == 404


async def test_api_key_header_defaults_and_is_kept_lower_case(client: httpx.AsyncClient) -> None:
    defaulted = await put(client, "apis", api("orders", project="shop", authentication={"apiKey": {}}))
    named = await put(
        client, "apis", api("billing", project="shop", authentication={"apiKey": {"header": "X-Key", "mode": "opaque"}})
    )

    assert defaulted.json()["spec"]["authentication"]["apiKey"]["header"] == "x-api-key"
    assert named.json()["spec"]["authentication"]["apiKey"] == {"header": "x-key", "mode": "opaque"}


# --- routes of two APIs never meet -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mine", "theirs"),
    [
        ({}, {}),
        ({"hostnames": ["api.example.com"]}, {"hostnames": ["*.example.com"]}),
        ({"hostnames": ["*.example.com"]}, {"hostnames": ["*"]}),
        ({"operations": [{"method": "GET", "path": "/{id}"}]}, {"operations": [{"method": "GET", "path": "/latest"}]}),
        ({"operations": [{"method": "POST", "path": "/"}]}, {}),
    ],
)
async def test_an_api_whose_routes_meet_another_projects_api_is_refused_without_naming_it(
    client: httpx.AsyncClient, mine: dict[str, Any], theirs: dict[str, Any]
) -> None:
    await given_objects(client, api("orders", project="shop", **theirs))

    response = await put(client, "apis", api("shadow", project="other", basePath="/orders", **mine))

    assert response.status_code == 409
    assert response.json()["detail"].startswith("an API of another project already answers ")
    assert "shop" not in response.json()["detail"]
    assert (await client.get("/v1/projects/other/apis/shadow")).status_code == 404


async def test_an_api_whose_routes_meet_one_of_its_projects_apis_is_refused_naming_it(
    client: httpx.AsyncClient,
) -> None:
    await given_objects(client, api("orders", project="shop"))

    response = await put(client, "apis", api("shadow", project="shop", basePath="/orders"))

    assert response.status_code == 409
    assert response.json()["detail"].startswith("API shop/orders already answers ")


@pytest.mark.parametrize(
    ("mine", "theirs"),
    [
        ({"hostnames": ["a.example.com"]}, {"hostnames": ["b.example.com"]}),
        ({"hostnames": ["api.example.com"]}, {"hostnames": ["*.example.org"]}),
        ({"operations": [{"method": "POST", "path": "/items"}]}, {"operations": [{"method": "GET", "path": "/items"}]}),
        ({"operations": [{"method": "GET", "path": "/a"}]}, {"operations": [{"method": "GET", "path": "/b"}]}),
    ],
)
async def test_apis_on_disjoint_hosts_or_methods_share_a_base_path(
    client: httpx.AsyncClient, mine: dict[str, Any], theirs: dict[str, Any]
) -> None:
    await given_objects(client, api("orders", project="shop", **theirs))

    response = await put(client, "apis", api("shadow", project="other", basePath="/orders", **mine))

    assert response.status_code == 201, response.text


async def test_of_concurrent_apis_on_one_route_one_is_accepted(client: httpx.AsyncClient) -> None:
    rivals = [api(f"orders-{n}", project=("shop", "other")[n % 2], basePath="/orders") for n in range(8)]

    responses = await asyncio.gather(*(put(client, "apis", body) for body in rivals))

    assert sorted(r.status_code for r in responses) == [201] + [409] * 7
    accepted = [body for body, r in zip(rivals, responses, strict=True) if r.status_code == 201]
    project, name = accepted[0]["metadata"]["project"], accepted[0]["metadata"]["name"]
    for body, response in zip(rivals, responses, strict=True):
        if response.status_code == 409:
            same_project = body["metadata"]["project"] == project
            assert (f"{project}/{name}" in response.json()["detail"]) == same_project, response.text
    for body in rivals:
        meta = body["metadata"]
        found = (await client.get(f"/v1/projects/{meta['project']}/apis/{meta['name']}")).status_code
        assert found == (200 if body is accepted[0] else 404)


async def test_a_write_refused_by_the_store_does_not_block_a_rival_on_its_route(client: httpx.AsyncClient) -> None:
    stale = api("stale", project="shop", basePath="/orders")
    stale["metadata"]["resourceVersion"] = "7"

    refused, accepted = await asyncio.gather(
        put(client, "apis", stale), put(client, "apis", api("orders", project="other"))
    )

    assert refused.status_code in (404, 409), refused.text
    assert accepted.status_code == 201, accepted.text


async def test_a_write_overtaken_again_and_again_gives_up_with_409_and_stores_nothing(
    client: httpx.AsyncClient, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    attempts: list[int] = []

    async def always_overtaken(kind: str, project: str, name: str, **_: Any) -> None:
        attempts.append(1)
        raise Overtaken(kind, project, name, by=("API", "other", "rival"), revision=1)

    monkeypatch.setattr(store, "put", always_overtaken)
    response = await put(client, "apis", api("orders", project="shop"))

    assert response.status_code == 409
    assert "kept changing" in response.json()["detail"]
    assert len(attempts) == CHECK_ATTEMPTS
    monkeypatch.undo()
    assert (await client.get(f"{SHOP}/apis/orders")).status_code == 404


async def test_apis_under_different_base_paths_are_accepted(client: httpx.AsyncClient) -> None:
    await given_objects(client, api("orders", project="shop"))

    response = await put(client, "apis", api("ordering", project="shop"))

    assert response.status_code == 201, response.text


async def test_updating_an_api_onto_anothers_routes_is_refused_and_keeps_it(client: httpx.AsyncClient) -> None:
    await given_objects(client, api("orders", project="shop"), api("billing", project="shop"))

    response = await put(client, "apis", api("billing", project="shop", basePath="/orders"))
    patched = await client.patch(f"{SHOP}/apis/billing", json={"spec": {"basePath": "/orders"}})

    assert (response.status_code, patched.status_code) == (409, 409)
    assert "shop/orders" in response.json()["detail"]
    assert (await client.get(f"{SHOP}/apis/billing")).json()["spec"]["basePath"] == "/billing"


async def test_an_api_replaced_with_its_own_routes_does_not_clash_with_itself(client: httpx.AsyncClient) -> None:
    await given_objects(client, api("orders", project="shop"))

    response = await put(client, "apis", api("orders", project="shop", timeout="5s"))

    assert response.status_code == 200, response.text


# --- credential records are read-only ----------------------------------------------------------------------------

READ_ONLY = ["/v1/keysets", KEY_SET]


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
@pytest.mark.parametrize("url", READ_ONLY)
async def test_credential_records_refuse_every_write(client: httpx.AsyncClient, method: str, url: str) -> None:
    before = await key_set(client)

    response = await client.request(
        method, url, json=document("KeySet", "api-keys", spec={"issuer": "me", "keys": []}, project="shop")
    )

    assert response.status_code == 405
    assert await key_set(client) == before


async def test_the_key_set_can_be_read_and_key_records_only_through_the_keys_endpoint(
    mobile: httpx.AsyncClient,
) -> None:
    issued = await issue(mobile)

    key_sets = await mobile.get("/v1/keysets")
    records = await mobile.get(f"{SHOP}/applicationkeys")
    record = await mobile.get(f"{SHOP}/applicationkeys/{issued['id']}")

    assert [item["metadata"]["name"] for item in key_sets.json()["items"]] == ["api-keys"]
    assert (records.status_code, record.status_code) == (404, 404)
    assert "applicationkeys" not in json.dumps((await mobile.get("/openapi.json")).json()["paths"])


# --- API keys: shown once, kept as digests -------------------------------------------------------------------------


async def test_an_issued_key_is_returned_once_with_its_id(mobile: httpx.AsyncClient) -> None:
    response = await mobile.post(KEYS)

    assert response.status_code == 201
    body = response.json()
    assert body["id"] and body["key"]
    assert (body["application"], body["revoked"], body["kind"], body["expires"]) == ("mobile", False, "signed", None)
    assert "sha256" not in body


async def test_listing_keys_shows_neither_the_key_nor_its_digest(mobile: httpx.AsyncClient) -> None:
    signed = await issue(mobile)
    imported = await issue(mobile, {"key": "an-opaque-key-from-elsewhere-0123"})

    response = await mobile.get(KEYS)

    assert response.status_code == 200
    assert {item["id"] for item in response.json()["items"]} == {signed["id"], imported["id"]}
    for issued in (signed, imported):
        assert issued["key"] not in response.text
        assert digest(issued["key"]) not in response.text
    assert all("key" not in item and "sha256" not in item for item in response.json()["items"])


async def test_the_stored_record_holds_the_digest_and_never_the_key(mobile: httpx.AsyncClient, store: Store) -> None:
    issued = await issue(mobile)

    record = await store.get("ApplicationKey", "shop", issued["id"])

    assert record.spec["sha256"] == digest(issued["key"])
    assert set(record.spec) <= {
        "application",
        "applicationUid",
        "created",
        "expires",
        "revoked",
        "sha256",
        "signingKeyId",
        "tokenExpires",
    }
    stored_values = [*record.spec.values(), *record.labels.values(), *record.annotations.values()]
    assert issued["key"] not in stored_values
    assert issued["key"] not in json.dumps([record.spec, record.status, record.labels, record.annotations])


async def test_no_key_reaches_the_database_file(mobile: httpx.AsyncClient, store: Store, tmp_path: Path) -> None:
    keys = [await issue(mobile), await issue(mobile, {"key": "an-opaque-key-from-elsewhere-0123"})]

    raw = database_bytes(tmp_path)

    for issued in keys:
        assert digest(issued["key"]).encode() in raw  # the file read is the one that holds the records
        assert issued["key"].encode() not in raw


async def test_revoking_a_key_marks_it_revoked_and_is_idempotent(mobile: httpx.AsyncClient, store: Store) -> None:
    issued = await issue(mobile)

    first = await mobile.delete(f"{KEYS}/{issued['id']}")
    revision = (await store.get("ApplicationKey", "shop", issued["id"])).revision
    second = await mobile.delete(f"{KEYS}/{issued['id']}")

    assert (first.status_code, second.status_code) == (200, 200)
    assert first.json()["revoked"] is second.json()["revoked"] is True
    assert (await store.get("ApplicationKey", "shop", issued["id"])).revision == revision
    assert [item["revoked"] for item in (await mobile.get(KEYS)).json()["items"]] == [True]


async def test_rotating_a_key_issues_a_new_one_and_ends_the_old_after_the_overlap(mobile: httpx.AsyncClient) -> None:
    old = await issue(mobile)
    started = datetime.now(UTC)

    response = await mobile.post(f"{KEYS}/{old['id']}/rotate", json={"overlap": "1h"})

    assert response.status_code == 201
    fresh = response.json()
    assert fresh["key"] != old["key"] and fresh["id"] != old["id"]
    assert fresh["replaces"]["id"] == old["id"]
    ends = moment(fresh["replaces"]["expires"])
    assert abs(ends - (started + timedelta(hours=1))) < timedelta(seconds=5)
    listed = {item["id"]: item for item in (await mobile.get(KEYS)).json()["items"]}
    assert listed[old["id"]]["expires"] == fresh["replaces"]["expires"]
    assert listed[fresh["id"]]["expires"] is None


async def test_rotation_never_extends_a_key_that_ends_sooner(mobile: httpx.AsyncClient) -> None:
    old = await issue(mobile, {"expiresIn": "10m"})

    response = await mobile.post(f"{KEYS}/{old['id']}/rotate", json={"overlap": "24h", "expiresIn": "720h"})

    assert response.status_code == 201
    assert response.json()["replaces"]["expires"] == old["expires"]
    assert moment(response.json()["expires"]) - moment(old["created"]) > timedelta(hours=719)


async def test_a_rotation_shortens_the_record_but_keeps_the_exp_the_key_carries(
    mobile: httpx.AsyncClient, store: Store
) -> None:
    old = await issue(mobile, {"expiresIn": "720h"})

    assert (await mobile.post(f"{KEYS}/{old['id']}/rotate", json={"overlap": "1h"})).status_code == 201

    record = await store.get("ApplicationKey", "shop", old["id"])
    carried = jwt.decode(old["key"], options={"verify_signature": False})["exp"]
    assert moment(record.spec["tokenExpires"]).timestamp() == carried
    assert moment(record.spec["expires"]) < moment(record.spec["tokenExpires"])


async def test_rotating_a_revoked_key_is_refused_with_409(mobile: httpx.AsyncClient) -> None:
    issued = await issue(mobile)
    await mobile.delete(f"{KEYS}/{issued['id']}")

    response = await mobile.post(f"{KEYS}/{issued['id']}/rotate")

    assert response.status_code == 409
    assert len((await mobile.get(KEYS)).json()["items"]) == 1


async def test_an_opaque_key_can_be_imported_and_is_kept_as_its_digest(mobile: httpx.AsyncClient, store: Store) -> None:
    key = "legacy-gateway-key-0123456789abcdef"

    imported = await issue(mobile, {"key": key, "expiresIn": "1h"})

    assert (imported["key"], imported["kind"]) == (key, "opaque")
    record = await store.get("ApplicationKey", "shop", imported["id"])
    assert record.spec["sha256"] == digest(key)
    assert "signingKeyId" not in record.spec and "tokenExpires" not in record.spec
    assert (await mobile.post(f"{KEYS}/{imported['id']}/rotate")).status_code == 409


@pytest.mark.parametrize(
    "body",
    [
        {"key": "too-short"},
        {"key": ""},
        {"key": 12345678901234567890123456},
        {"expiresIn": "soon"},
        {"expiresIn": "-1h"},
        {"expiresIn": "9999999999999h"},
        {"expiresIn": "1000000h"},
        [],
        "key",
    ],
)
async def test_a_bad_key_request_is_refused_with_422(mobile: httpx.AsyncClient, body: Any) -> None:
    response = await mobile.post(KEYS, json=body)

    assert response.status_code == 422, response.text
    assert (await mobile.get(KEYS)).json()["items"] == []


async def test_a_bad_rotation_request_is_refused_with_422(mobile: httpx.AsyncClient) -> None:
    issued = await issue(mobile)

    responses = [
        await mobile.post(f"{KEYS}/{issued['id']}/rotate", json=body)
        for body in ({"overlap": "soon"}, {"overlap": "9999999999999h"}, {"expiresIn": "later"})
    ]

    assert [r.status_code for r in responses] == [422, 422, 422]
    assert len((await mobile.get(KEYS)).json()["items"]) == 1


async def test_keys_of_an_unknown_application_answer_404(client: httpx.AsyncClient) -> None:
    responses = [
        await client.post(KEYS),
        await client.get(KEYS),
        await client.post("/v1/projects/nope/applications/mobile/keys"),
    ]

    assert [r.status_code for r in responses] == [404, 404, 404]


@pytest.mark.parametrize("action", ["revoke", "rotate"])
async def test_an_unknown_key_or_another_applications_key_answers_404(mobile: httpx.AsyncClient, action: str) -> None:
    await given_objects(mobile, document("Application", "web", spec={}, project="shop"))
    foreign = await issue(mobile, url=f"{SHOP}/applications/web/keys")

    async def act(key_id: str) -> httpx.Response:
        if action == "revoke":
            return await mobile.delete(f"{KEYS}/{key_id}")
        return await mobile.post(f"{KEYS}/{key_id}/rotate")

    assert (await act("k-unknown")).status_code == 404
    assert (await act(foreign["id"])).status_code == 404
    web_keys = (await mobile.get(f"{SHOP}/applications/web/keys")).json()["items"]
    assert [(item["id"], item["revoked"], item["expires"]) for item in web_keys] == [(foreign["id"], False, None)]


async def test_an_issued_key_verifies_against_the_public_key_set(mobile: httpx.AsyncClient) -> None:
    issued = await issue(mobile, {"expiresIn": "1h"})

    kid = jwt.get_unverified_header(issued["key"])["kid"]
    [jwk] = [jwk for jwk in await key_set(mobile) if jwk["kid"] == kid]
    claims = jwt.decode(issued["key"], jwt.PyJWK(jwk).key, algorithms=["ES256"], issuer="meshplane")

    assert jwt.get_unverified_header(issued["key"])["alg"] == "ES256"
    assert (claims["iss"], claims["sub"], claims["jti"]) == ("meshplane", "shop/mobile", issued["id"])
    assert claims["exp"] == int(moment(issued["expires"]).timestamp())


async def test_the_key_set_holds_no_private_key_material(mobile: httpx.AsyncClient) -> None:
    await mobile.post("/v1/signing-keys/rotate")

    keys = await key_set(mobile)

    assert len(keys) == 2
    for jwk in keys:
        assert (jwk["kty"], jwk["crv"], jwk["alg"]) == ("EC", "P-256", "ES256")
        assert not {"d", "p", "q", "dp", "dq", "qi", "k"} & set(jwk)


async def test_after_signing_key_rotation_new_keys_carry_the_new_kid(mobile: httpx.AsyncClient) -> None:
    before = await issue(mobile)
    old_kid = jwt.get_unverified_header(before["key"])["kid"]

    rotated = await mobile.post("/v1/signing-keys/rotate")
    after = await issue(mobile)

    assert rotated.status_code == 201
    new_kid = rotated.json()["kid"]
    assert new_kid != old_kid
    assert jwt.get_unverified_header(after["key"])["kid"] == new_kid
    assert {jwk["kid"] for jwk in await key_set(mobile)} == {old_kid, new_kid}


async def test_a_rotated_signing_key_signs_even_when_an_older_key_file_looks_newer(
    mobile: httpx.AsyncClient, signing: SigningKeys
) -> None:
    [older] = signing.directory.glob("*.pem")
    ahead = older.stat().st_mtime_ns + 3_600 * 10**9  # the clock was stepped back since it was made
    os.utime(older, ns=(ahead, ahead))

    new_kid = (await mobile.post("/v1/signing-keys/rotate")).json()["kid"]

    assert jwt.get_unverified_header((await issue(mobile))["key"])["kid"] == new_kid


async def test_retiring_a_signing_key_takes_it_out_of_the_key_set(mobile: httpx.AsyncClient) -> None:
    old_kid = jwt.get_unverified_header((await issue(mobile))["key"])["kid"]
    new_kid = (await mobile.post("/v1/signing-keys/rotate")).json()["kid"]

    response = await mobile.delete(f"/v1/signing-keys/{old_kid}")

    assert response.status_code == 200
    assert [jwk["kid"] for jwk in await key_set(mobile)] == [new_kid]
    assert (await mobile.delete(f"/v1/signing-keys/{old_kid}")).status_code == 404


async def test_the_only_signing_key_cannot_be_retired(mobile: httpx.AsyncClient) -> None:
    kid = jwt.get_unverified_header((await issue(mobile))["key"])["kid"]

    response = await mobile.delete(f"/v1/signing-keys/{kid}")

    assert response.status_code == 409
    assert [jwk["kid"] for jwk in await key_set(mobile)] == [kid]
    assert jwt.get_unverified_header((await issue(mobile))["key"])["kid"] == kid


async def test_deleting_an_application_deletes_its_key_records(mobile: httpx.AsyncClient, store: Store) -> None:
    await given_objects(mobile, document("Application", "web", spec={}, project="shop"))
    gone = [await issue(mobile), await issue(mobile, {"key": "an-opaque-key-from-elsewhere-0123"})]
    kept = await issue(mobile, url=f"{SHOP}/applications/web/keys")

    response = await mobile.delete(f"{SHOP}/applications/mobile")

    assert response.status_code == 200
    for issued in gone:
        with pytest.raises(NotFound):
            await store.get("ApplicationKey", "shop", issued["id"])
    listed = (await mobile.get(f"{SHOP}/applications/web/keys")).json()["items"]
    assert [item["id"] for item in listed] == [kept["id"]]
    assert (await store.get("ApplicationKey", "shop", kept["id"])).spec["application"] == "web"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3),
    max_leaves=10,
)
durations = st.from_regex(r"\A[0-9]{1,16}(\.[0-9]{1,3})?(ms|s|m|h)\Z") | st.text(max_size=12)
key_requests = st.fixed_dictionaries(
    {},
    optional={
        "expiresIn": durations | json_values,
        "key": st.text(min_size=20, max_size=40) | json_values,
        "overlap": durations,
    },
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=key_requests | json_values)
async def test_arbitrary_json_to_the_keys_endpoints_never_causes_a_server_error(
    mobile: httpx.AsyncClient, body: Any
) -> None:
    issued = await mobile.post(KEYS, content=json.dumps(body), headers={"content-type": "application/json"})
    assert issued.status_code in (201, 422), issued.text
    if issued.status_code == 201:
        assert issued.json()["key"] and "sha256" not in issued.json()
        rotated = await mobile.post(
            f"{KEYS}/{issued.json()['id']}/rotate",
            content=json.dumps(body),
            headers={"content-type": "application/json"},
        )
        assert rotated.status_code < 500, rotated.text


async def test_a_key_is_not_stored_for_an_application_deleted_while_it_was_issued(
    store: Store, signing: SigningKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    await publish_key_set(store, signing)
    objects = ObjectService(store)
    credentials = Credentials(store, objects, signing)
    async with north_client(create_app(store), ["shop"]) as http:
        await given_objects(http, document("Application", "mobile", spec={}, project="shop"))
    read = objects.get

    async def read_then_lose(*args: Any) -> Any:
        found = await read(*args)
        await store.delete("Application", "shop", "mobile")
        return found

    monkeypatch.setattr(objects, "get", read_then_lose)

    for request in (NewKey(), NewKey(key="an-opaque-key-from-elsewhere-0123")):
        with pytest.raises(Problem) as refused:
            await credentials.issue("shop", "mobile", request)
        assert refused.value.status == 404
        await store.put("Application", "shop", "mobile", spec={})
    assert (await store.list("ApplicationKey", "shop"))[0] == []
