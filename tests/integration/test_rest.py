"""The north REST API in process: CRUD, optimistic concurrency, problem documents, lists and the service routes."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meshplane.model.registry import REGISTRY
from meshplane.server.app import create_app
from meshplane.store.store import Store
from meshplane_testing.documents import api
from meshplane_testing.north import north_client

pytestmark = pytest.mark.timeout(60)

PROBLEM_JSON = "application/problem+json"
APIS = "/v1/projects/shop/apis"


def with_metadata(doc: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {**doc, "metadata": {**doc["metadata"], **fields}}


def field_paths(response: httpx.Response) -> list[str]:
    return [error["path"] for error in response.json()["errors"]]


@pytest.fixture
async def client(store: Store) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a fresh server that holds one project, `shop`."""
    async with north_client(create_app(store), ["shop"]) as http:
        yield http


# --- create, replace, read, patch, delete ------------------------------------------------------------------------


async def test_post_creates_an_object_with_server_owned_metadata(client: httpx.AsyncClient) -> None:
    response = await client.post(APIS, json=api("orders", project="shop"))

    assert response.status_code == 201
    meta = response.json()["metadata"]
    assert (meta["name"], meta["project"], meta["generation"]) == ("orders", "shop", 1)
    assert meta["uid"] and meta["creationTimestamp"]
    assert response.headers["ETag"] == f'"{meta["resourceVersion"]}"'


async def test_post_of_an_existing_object_is_refused_with_409(client: httpx.AsyncClient) -> None:
    await client.post(APIS, json=api("orders", project="shop"))

    response = await client.post(APIS, json=api("orders", project="shop", basePath="/other"))

    assert response.status_code == 409
    assert response.headers["content-type"] == PROBLEM_JSON
    assert (await client.get(f"{APIS}/orders")).json()["spec"]["basePath"] == "/orders"


async def test_put_creates_with_201_then_replaces_with_200(client: httpx.AsyncClient) -> None:
    created = await client.put(f"{APIS}/orders", json=api("orders", project="shop"))
    replaced = await client.put(f"{APIS}/orders", json=api("orders", project="shop", basePath="/v2/orders"))

    assert (created.status_code, replaced.status_code) == (201, 200)
    assert replaced.json()["spec"]["basePath"] == "/v2/orders"
    assert replaced.json()["metadata"]["generation"] == 2
    assert int(replaced.json()["metadata"]["resourceVersion"]) > int(created.json()["metadata"]["resourceVersion"])


async def test_put_of_an_identical_object_keeps_its_resource_version(client: httpx.AsyncClient) -> None:
    first = await client.put(f"{APIS}/orders", json=api("orders", project="shop"))

    again = await client.put(f"{APIS}/orders", json=api("orders", project="shop"))

    assert again.status_code == 200
    assert again.json()["metadata"]["resourceVersion"] == first.json()["metadata"]["resourceVersion"]
    assert again.headers["ETag"] == first.headers["ETag"]


async def test_get_returns_the_object_with_its_resource_version_as_etag(client: httpx.AsyncClient) -> None:
    put = await client.put(f"{APIS}/orders", json=api("orders", labels={"team": "checkout"}, project="shop"))

    response = await client.get(f"{APIS}/orders")

    assert response.status_code == 200
    assert response.json() == put.json()
    assert response.headers["ETag"] == f'"{put.json()["metadata"]["resourceVersion"]}"'


async def test_merge_patch_adds_a_label_and_changes_a_backend_port(client: httpx.AsyncClient) -> None:
    await client.put(f"{APIS}/orders", json=api("orders", labels={"team": "checkout"}, project="shop"))
    patch = {"metadata": {"labels": {"tier": "gold"}}, "spec": {"backends": [{"host": "127.0.0.1", "port": 9002}]}}

    response = await client.patch(f"{APIS}/orders", json=patch)

    assert response.status_code == 200
    body = (await client.get(f"{APIS}/orders")).json()
    assert body["metadata"]["labels"] == {"team": "checkout", "tier": "gold"}
    assert [b["port"] for b in body["spec"]["backends"]] == [9002]
    assert body["spec"]["basePath"] == "/orders"


async def test_merge_patch_null_removes_a_label(client: httpx.AsyncClient) -> None:
    await client.put(f"{APIS}/orders", json=api("orders", labels={"team": "checkout", "tier": "gold"}, project="shop"))

    response = await client.patch(f"{APIS}/orders", json={"metadata": {"labels": {"tier": None}}})

    assert response.json()["metadata"]["labels"] == {"team": "checkout"}


async def test_a_patch_naming_no_revision_is_not_refused_for_a_status_written_during_it(
    client: httpx.AsyncClient, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    await client.put(f"{APIS}/orders", json=api("orders", project="shop"))
    read = store.get
    interleaved: list[int] = []

    async def read_then_status(kind: str, project: str, name: str) -> Any:
        found = await read(kind, project, name)
        if kind == "API" and not interleaved:
            interleaved.append((await store.merge_status(kind, project, name, {"phase": "Seen"})).revision)
        return found

    monkeypatch.setattr(store, "get", read_then_status)

    response = await client.patch(f"{APIS}/orders", json={"metadata": {"labels": {"tier": "gold"}}})

    assert interleaved, "no status was written between the patch's read and its write"
    assert response.status_code == 200, response.text
    assert response.json()["metadata"]["labels"] == {"tier": "gold"}
    assert response.json()["status"]["phase"] == "Seen"


@pytest.mark.parametrize("patch", [{"metadata": None}, {"metadata": 5}, {"metadata": {"resourceVersion": 3}}])
async def test_merge_patch_that_breaks_metadata_is_refused_with_422(
    client: httpx.AsyncClient, patch: dict[str, Any]
) -> None:
    await client.put(f"{APIS}/orders", json=api("orders", project="shop"))

    response = await client.patch(f"{APIS}/orders", json=patch)

    assert response.status_code == 422
    assert response.headers["content-type"] == PROBLEM_JSON
    assert all(path.startswith("metadata") for path in field_paths(response))


async def test_delete_removes_the_object_so_get_answers_404(client: httpx.AsyncClient) -> None:
    await client.put(f"{APIS}/orders", json=api("orders", project="shop"))

    deleted = await client.delete(f"{APIS}/orders")
    response = await client.get(f"{APIS}/orders")

    assert deleted.status_code == 200
    assert response.status_code == 404
    assert response.headers["content-type"] == PROBLEM_JSON
    assert "orders" in response.json()["detail"]


# --- optimistic concurrency ----------------------------------------------------------------------------------------


async def _stale_and_current(client: httpx.AsyncClient) -> tuple[str, dict[str, Any]]:
    """An API changed once after it was read: the resourceVersion first read, and the current object."""
    stale = (await client.put(f"{APIS}/orders", json=api("orders", project="shop"))).json()["metadata"][
        "resourceVersion"
    ]
    current = (await client.put(f"{APIS}/orders", json=api("orders", project="shop", basePath="/v2"))).json()
    return stale, current


async def test_put_with_a_stale_resource_version_is_refused_with_409(client: httpx.AsyncClient) -> None:
    stale, current = await _stale_and_current(client)

    response = await client.put(
        f"{APIS}/orders", json=with_metadata(api("orders", project="shop", basePath="/v3"), resourceVersion=stale)
    )

    assert response.status_code == 409
    assert response.headers["content-type"] == PROBLEM_JSON
    assert (await client.get(f"{APIS}/orders")).json() == current


async def test_put_with_a_stale_if_match_is_refused_with_409(client: httpx.AsyncClient) -> None:
    stale, current = await _stale_and_current(client)

    response = await client.put(
        f"{APIS}/orders", json=api("orders", project="shop", basePath="/v3"), headers={"If-Match": f'"{stale}"'}
    )

    assert response.status_code == 409
    assert (await client.get(f"{APIS}/orders")).json() == current


async def test_put_with_the_current_if_match_is_accepted(client: httpx.AsyncClient) -> None:
    _, current = await _stale_and_current(client)
    etag = f'W/"{current["metadata"]["resourceVersion"]}"'

    response = await client.put(
        f"{APIS}/orders", json=api("orders", project="shop", basePath="/v3"), headers={"If-Match": etag}
    )

    assert response.status_code == 200
    assert response.json()["spec"]["basePath"] == "/v3"


async def test_a_version_read_before_only_status_changed_may_still_be_written(
    client: httpx.AsyncClient, store: Store
) -> None:
    _, current = await _stale_and_current(client)
    await store.set_status("API", "shop", "orders", {"clusters": [{"cluster": "a", "state": "Applied"}]})
    etag = f'"{current["metadata"]["resourceVersion"]}"'

    response = await client.put(
        f"{APIS}/orders", json=api("orders", project="shop", basePath="/v3"), headers={"If-Match": etag}
    )

    assert response.status_code == 200, response.text
    assert response.json()["spec"]["basePath"] == "/v3"


@pytest.mark.parametrize("stale_in", ["body", "header"])
async def test_patch_with_a_stale_version_is_refused_with_409(client: httpx.AsyncClient, stale_in: str) -> None:
    stale, current = await _stale_and_current(client)
    patch: dict[str, Any] = {"metadata": {"labels": {"tier": "gold"}}}
    headers = {"If-Match": f'"{stale}"'} if stale_in == "header" else {}
    if stale_in == "body":
        patch["metadata"]["resourceVersion"] = stale

    response = await client.patch(f"{APIS}/orders", json=patch, headers=headers)

    assert response.status_code == 409
    assert (await client.get(f"{APIS}/orders")).json() == current


async def test_resource_version_zero_is_a_version_not_an_absent_one(client: httpx.AsyncClient) -> None:
    _, current = await _stale_and_current(client)

    by_header = await client.put(
        f"{APIS}/orders", json=api("orders", project="shop", basePath="/v3"), headers={"If-Match": '"0"'}
    )
    by_patch = await client.patch(
        f"{APIS}/orders", json={"metadata": {"resourceVersion": "0"}, "spec": {"version": "x"}}
    )

    assert (by_header.status_code, by_patch.status_code) == (409, 409)
    assert (await client.get(f"{APIS}/orders")).json() == current


async def test_delete_with_a_stale_if_match_is_refused_with_409(client: httpx.AsyncClient) -> None:
    stale, current = await _stale_and_current(client)

    response = await client.delete(f"{APIS}/orders", headers={"If-Match": f'"{stale}"'})

    assert response.status_code == 409
    assert (await client.get(f"{APIS}/orders")).json() == current


# --- problem documents -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url_name", "doc", "path"),
    [
        (
            "orders",
            api("orders", project="shop", backends=[{"host": "127.0.0.1", "port": 70000}]),
            "spec.backends[0].port",
        ),
        ("Orders", api("Orders", project="shop"), "metadata.name"),
        ("orders", api("orders", project="shop", bogus=True), "spec.bogus"),
        (
            "orders",
            {**api("orders", project="shop"), "spec": {"backends": [{"host": "h", "port": 80}]}},
            "spec.basePath",
        ),
        ("orders", {**api("orders", project="shop"), "kind": "Project"}, "kind"),
        ("orders", {**api("orders", project="shop"), "kind": "Bogus"}, "kind"),
        ("orders", api("payments", project="shop"), "metadata.name"),
        ("orders", with_metadata(api("orders", project="shop"), project="other"), "metadata.project"),
        ("orders", api("orders", project="shop", backends=[{"host": "h", "port": 80, "weight": 0}]), "spec.backends"),
        ("orders", api("orders", project="shop", operations=[{"method": "GET", "path": "/a"}] * 2), "spec.operations"),
        ("orders", with_metadata(api("orders", project="shop"), resourceVersion="latest"), "metadata.resourceVersion"),
    ],
    ids=[
        "port-out-of-range",
        "name-not-dns-1123",
        "unknown-field",
        "missing-base-path",
        "wrong-kind",
        "unknown-kind",
        "name-differs-from-url",
        "project-differs-from-url",
        "no-backend-takes-traffic",
        "duplicate-operation",
        "resource-version-not-a-number",
    ],
)
async def test_invalid_object_is_refused_with_422_naming_the_field(
    client: httpx.AsyncClient, url_name: str, doc: dict[str, Any], path: str
) -> None:
    response = await client.put(f"{APIS}/{url_name}", json=doc)

    assert response.status_code == 422
    assert response.headers["content-type"] == PROBLEM_JSON
    problem = response.json()
    assert (problem["status"], problem["type"]) == (422, "about:blank")
    assert path in field_paths(response)
    assert all(error["message"] for error in problem["errors"])
    assert (await client.get(f"{APIS}/{url_name}")).status_code == 404


async def test_body_that_is_not_json_is_refused_with_400(client: httpx.AsyncClient) -> None:
    response = await client.put(f"{APIS}/orders", content=b"{not json", headers={"content-type": "application/json"})

    assert response.status_code == 400
    assert response.headers["content-type"] == PROBLEM_JSON


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("GET", "/v1/projects/nope/apis/orders"),
        ("GET", "/v1/projects/nope/apis"),
        ("PUT", "/v1/projects/nope/apis/orders"),
    ],
)
async def test_unknown_project_answers_404(client: httpx.AsyncClient, method: str, url: str) -> None:
    doc = {**api("orders", project="shop"), "metadata": {"name": "orders", "project": "nope"}}

    response = await client.request(method, url, json=doc if method == "PUT" else None)

    assert response.status_code == 404
    assert response.headers["content-type"] == PROBLEM_JSON
    assert "nope" in response.json()["detail"]


@pytest.mark.parametrize(
    ("method", "url", "doc"),
    [
        ("PUT", "/v1/projects/nope/apis/orders", {"kind": "API", "metadata": {"name": "orders"}, "spec": {}}),
        ("POST", "/v1/projects/nope/apis", {"kind": "API", "metadata": {"name": "orders"}, "spec": {"basePath": 3}}),
        (
            "PUT",
            "/v1/projects/nope/apis/orders",
            {**api("orders", project="shop"), "metadata": {"name": "other", "project": "shop"}},
        ),
        (
            "PUT",
            "/v1/projects/nope/subscriptions/s",
            {"kind": "Subscription", "metadata": {"name": "s"}, "spec": {"application": "app", "api": "orders"}},
        ),
    ],
    ids=["invalid-put", "invalid-post", "mismatched-metadata", "names-missing-objects"],
)
async def test_a_refused_write_to_an_unknown_project_answers_404_first(
    client: httpx.AsyncClient, method: str, url: str, doc: dict[str, Any]
) -> None:
    response = await client.request(method, url, json=doc)

    assert response.status_code == 404
    assert "nope" in response.json()["detail"]


async def test_an_invalid_body_in_a_known_project_still_answers_422(client: httpx.AsyncClient) -> None:
    response = await client.put(f"{APIS}/orders", json={"kind": "API", "metadata": {"name": "orders"}, "spec": {}})

    assert response.status_code == 422
    assert (await client.get(f"{APIS}/orders")).status_code == 404


@pytest.mark.parametrize("url", ["/v1/bogus", "/v1/projects/shop/bogus", "/v1/projects/shop/bogus/x"])
async def test_unknown_plural_answers_404_problem(client: httpx.AsyncClient, url: str) -> None:
    response = await client.get(url)

    assert response.status_code == 404
    assert response.headers["content-type"] == PROBLEM_JSON
    assert response.json()["status"] == 404


async def test_deleting_a_project_that_still_holds_apis_is_refused_with_409(client: httpx.AsyncClient) -> None:
    await client.put(f"{APIS}/orders", json=api("orders", project="shop"))

    response = await client.delete("/v1/projects/shop")

    assert response.status_code == 409
    assert "apis" in response.json()["detail"]
    assert (await client.get("/v1/projects/shop")).status_code == 200


async def test_deleting_a_project_refuses_an_object_that_landed_in_it_after_the_look(
    client: httpx.AsyncClient, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_delete = store.delete

    async def rival_lands_first(kind: str, project: str, name: str, **kwargs: Any) -> Any:
        monkeypatch.setattr(store, "delete", real_delete)
        await store.put("API", "shop", "late", spec=api("late", project="shop")["spec"], within=("Project", "", "shop"))
        return await real_delete(kind, project, name, **kwargs)

    monkeypatch.setattr(store, "delete", rival_lands_first)
    response = await client.delete("/v1/projects/shop")

    assert response.status_code == 409, response.text
    assert "apis" in response.json()["detail"]
    assert (await client.get("/v1/projects/shop")).status_code == 200
    assert (await client.get(f"{APIS}/late")).status_code == 200


async def test_deleting_an_empty_project_succeeds(client: httpx.AsyncClient) -> None:
    await client.put(f"{APIS}/orders", json=api("orders", project="shop"))
    await client.delete(f"{APIS}/orders")

    response = await client.delete("/v1/projects/shop")

    assert response.status_code == 200
    assert (await client.get("/v1/projects/shop")).status_code == 404


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=12,
)
# Bodies near the real shape reach deeper into validation than uniformly random JSON would.
near_api_docs = st.fixed_dictionaries(
    {},
    optional={
        "apiVersion": st.sampled_from(["meshplane.io/v1alpha1", "v1"]) | json_values,
        "kind": st.sampled_from(["API", "apis", "Project", ""]) | json_values,
        "metadata": st.fixed_dictionaries(
            {},
            optional={
                "name": st.sampled_from(["orders", "Orders", ""]) | json_values,
                "project": st.sampled_from(["shop", "nope"]) | json_values,
                "labels": json_values,
                "resourceVersion": st.sampled_from(["1", "0", "x", 'W/"1"']) | json_values,
            },
        )
        | json_values,
        "spec": st.fixed_dictionaries(
            {},
            optional={
                "basePath": st.sampled_from(["/orders", "/", "orders/", ""]) | json_values,
                "backends": st.lists(
                    st.fixed_dictionaries({}, optional={"host": json_values, "port": json_values}), max_size=2
                )
                | json_values,
                "operations": json_values,
                "timeout": st.sampled_from(["15s", "1e400s", "-1s"]) | json_values,
            },
        )
        | json_values,
        "status": json_values,
    },
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=near_api_docs | json_values)
async def test_arbitrary_json_put_never_causes_a_server_error(client: httpx.AsyncClient, body: Any) -> None:
    response = await client.put(
        f"{APIS}/orders", content=json.dumps(body), headers={"content-type": "application/json"}
    )

    assert response.status_code < 500, response.text


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(patch=near_api_docs | json_values)
async def test_arbitrary_json_merge_patch_never_causes_a_server_error(client: httpx.AsyncClient, patch: Any) -> None:
    await client.put(f"{APIS}/orders", json=api("orders", project="shop"))

    response = await client.patch(
        f"{APIS}/orders", content=json.dumps(patch), headers={"content-type": "application/merge-patch+json"}
    )

    assert response.status_code < 500, response.text


# --- lists ---------------------------------------------------------------------------------------------------------


@pytest.fixture
async def labelled_apis(client: httpx.AsyncClient) -> None:
    """a: team=a, b: team=b, c: team=checkout, d: no team."""
    for name, labels in [("a", {"team": "a"}), ("b", {"team": "b"}), ("c", {"team": "checkout"}), ("d", {})]:
        assert (await client.put(f"{APIS}/{name}", json=api(name, labels=labels, project="shop"))).status_code == 201


@pytest.mark.usefixtures("labelled_apis")
@pytest.mark.parametrize(
    ("selector", "names"),
    [
        ("team=checkout", ["c"]),
        ("team==checkout", ["c"]),
        ("team!=a", ["b", "c", "d"]),
        ("team in (a,b)", ["a", "b"]),
        ("team notin (a,b)", ["c", "d"]),
        ("!team", ["d"]),
        ("team", ["a", "b", "c"]),
        ("team,team!=b", ["a", "c"]),
    ],
)
async def test_list_filters_by_label_selector(client: httpx.AsyncClient, selector: str, names: list[str]) -> None:
    response = await client.get(APIS, params={"labelSelector": selector})

    assert response.status_code == 200
    assert response.json()["kind"] == "APIList"
    assert [item["metadata"]["name"] for item in response.json()["items"]] == names


@pytest.mark.parametrize("selector", ["team in (a", "=x", "a b", "team in ()", "a=b=c", "!"])
async def test_list_with_a_bad_label_selector_is_refused_with_400(client: httpx.AsyncClient, selector: str) -> None:
    response = await client.get(APIS, params={"labelSelector": selector})

    assert response.status_code == 400
    assert response.headers["content-type"] == PROBLEM_JSON
    assert field_paths(response) == ["labelSelector"]


async def test_list_pages_cover_every_item_exactly_once(client: httpx.AsyncClient) -> None:
    names = [f"api-{i:02d}" for i in range(7)]
    for name in names:
        await client.put(f"{APIS}/{name}", json=api(name, project="shop"))
    seen: list[str] = []
    params: dict[str, Any] = {"limit": 3}

    for _ in range(len(names)):
        page = (await client.get(APIS, params=params)).json()
        assert len(page["items"]) <= 3
        seen += [item["metadata"]["name"] for item in page["items"]]
        if "continue" not in page["metadata"]:
            break
        params["continue"] = page["metadata"]["continue"]

    assert seen == names


async def test_list_pages_combine_with_a_label_selector(client: httpx.AsyncClient) -> None:
    for i in range(6):
        await client.put(
            f"{APIS}/api-{i}", json=api(f"api-{i}", labels={"even": str(i % 2 == 0).lower()}, project="shop")
        )

    first = (await client.get(APIS, params={"labelSelector": "even=true", "limit": 2})).json()
    rest = (
        await client.get(
            APIS, params={"labelSelector": "even=true", "limit": 2, "continue": first["metadata"]["continue"]}
        )
    ).json()

    assert [i["metadata"]["name"] for i in first["items"] + rest["items"]] == ["api-0", "api-2", "api-4"]
    assert "continue" not in rest["metadata"]


@pytest.mark.parametrize("params", [{"continue": "not-a-token"}, {"limit": 0}, {"limit": "many"}])
async def test_list_with_bad_paging_is_refused_without_a_server_error(
    client: httpx.AsyncClient, params: dict[str, Any]
) -> None:
    response = await client.get(APIS, params=params)

    assert response.status_code in (400, 422)
    assert response.headers["content-type"] == PROBLEM_JSON


# --- OpenAPI, health and metrics -------------------------------------------------------------------------------------


async def test_openapi_documents_every_kind_and_the_problem_shape(client: httpx.AsyncClient) -> None:
    response = await client.get("/openapi.json")

    doc = response.json()
    assert response.status_code == 200
    assert doc["openapi"].startswith("3.")
    for info in (info for info in REGISTRY if info.exposed):
        base = f"/v1/projects/{{project}}/{info.plural}" if info.namespaced else f"/v1/{info.plural}"
        writes = {"post"} if info.writable else set()
        assert set(doc["paths"][base]) == {"get"} | writes
        item_writes = {"put", "patch", "delete"} if info.writable else set()
        assert set(doc["paths"][f"{base}/{{name}}"]) == {"get"} | item_writes
    schemas = doc["components"]["schemas"]
    assert {"API", "APISpec", "ProblemDetail"} <= set(schemas)
    assert "basePath" in schemas["APISpec"]["properties"]
    put_responses = doc["paths"]["/v1/projects/{project}/apis/{name}"]["put"]["responses"]
    assert {"200", "201", "409", "422"} <= set(put_responses)
    assert PROBLEM_JSON in put_responses["422"]["content"]


async def test_openapi_references_only_schemas_it_defines(client: httpx.AsyncClient) -> None:
    doc = (await client.get("/openapi.json")).json()

    refs = set(re.findall(r'"\$ref": "#/components/schemas/([^"]+)"', json.dumps(doc)))

    assert refs
    assert refs <= set(doc["components"]["schemas"])


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
async def test_health_endpoints_answer_ok(client: httpx.AsyncClient, path: str) -> None:
    response = await client.get(path)

    assert response.status_code == 200
    assert response.json()["status"] == "ok"


async def test_metrics_count_http_requests_by_route_template(client: httpx.AsyncClient) -> None:
    await client.get(f"{APIS}/nothing-here")

    response = await client.get("/metrics")

    assert response.status_code == 200
    assert "meshplane_http_requests_total" in response.text
    assert "/v1/projects/{project}/apis/{name}" in response.text
    assert "/v1/projects/shop/apis/nothing-here" not in response.text
