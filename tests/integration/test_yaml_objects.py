"""The object routes speak YAML as they speak JSON: bodies sent as application/yaml, reads that ask for it; a
YAML that does not parse is a 400 naming its line, an invalid one a 422 naming its fields, and write-only values
stay hidden exactly as in JSON reads."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import yaml

from meshplane.server.app import create_app
from meshplane.server.sealing import FileDataKey, Sealer
from meshplane.store.store import Store
from meshplane_testing.documents import api, backend
from meshplane_testing.north import north_client

pytestmark = pytest.mark.timeout(60)

ORDERS = "/v1/projects/shop/apis/orders"
AS_YAML = {"Content-Type": "application/yaml"}
ORDERS_YAML = """\
apiVersion: meshplane.io/v1alpha1
kind: API
metadata:
  name: orders
  project: shop
  labels: {team: sales}
spec:
  basePath: /orders
  backends:
    - host: 127.0.0.1
      port: 9001
"""


@pytest.fixture
async def client(store: Store, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    """A fresh server holding project `shop`, with a data key to seal write-only values."""
    app = create_app(store, sealer=Sealer(FileDataKey(tmp_path / "data-key")))
    async with north_client(app, ["shop"]) as http:
        yield http


async def test_a_yaml_body_is_stored_as_its_json_twin_would_be(client: httpx.AsyncClient) -> None:
    created = await client.put(ORDERS, content=ORDERS_YAML, headers=AS_YAML)
    read = await client.get(ORDERS)

    assert created.status_code == 201, created.text
    assert read.json()["spec"]["basePath"] == "/orders"
    assert read.json()["metadata"]["labels"] == {"team": "sales"}
    posted = await client.post(
        "/v1/projects/shop/apis", content=ORDERS_YAML.replace("orders", "billing"), headers=AS_YAML
    )
    assert posted.status_code == 201, posted.text


async def test_a_read_that_asks_for_yaml_gets_the_json_read_in_yaml_with_its_etag(client: httpx.AsyncClient) -> None:
    credential = {"bearer": {"token": "the-backends-secret-token"}}
    doc = api("orders", project="shop", backends=[backend(9001, credential=credential)])
    (await client.put(ORDERS, json=doc)).raise_for_status()

    as_json = await client.get(ORDERS)
    as_yaml = await client.get(ORDERS, headers={"Accept": "application/yaml"})

    assert as_yaml.status_code == 200
    assert as_yaml.headers["content-type"].startswith("application/yaml")
    assert as_yaml.headers["ETag"] == as_json.headers["ETag"]
    assert yaml.safe_load(as_yaml.text) == as_json.json()
    assert "the-backends-secret-token" not in as_yaml.text
    assert as_json.json()["spec"]["backends"][0]["credential"]["bearer"]["token"]["set"] is True


async def test_json_stays_the_answer_unless_yaml_is_preferred(client: httpx.AsyncClient) -> None:
    (await client.put(ORDERS, content=ORDERS_YAML, headers=AS_YAML)).raise_for_status()

    for accept in ("*/*", "application/json, application/yaml;q=0.5", "application/json, application/yaml"):
        answer = await client.get(ORDERS, headers={"Accept": accept})
        assert answer.headers["content-type"].startswith("application/json"), accept
    preferred = await client.get(ORDERS, headers={"Accept": "application/json;q=0.5, application/yaml"})
    assert preferred.headers["content-type"].startswith("application/yaml")


async def test_a_yaml_syntax_error_is_a_400_naming_its_line_and_stores_nothing(client: httpx.AsyncClient) -> None:
    broken = ORDERS_YAML.replace("  basePath: /orders", "  basePath: [/orders")

    answer = await client.put(ORDERS, content=broken, headers=AS_YAML)

    assert answer.status_code == 400
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert "at line 9, column 11" in answer.json()["detail"], answer.json()
    assert (await client.get(ORDERS)).status_code == 404


async def test_an_invalid_yaml_object_names_its_field_and_leaves_the_stored_one(client: httpx.AsyncClient) -> None:
    (await client.put(ORDERS, content=ORDERS_YAML, headers=AS_YAML)).raise_for_status()

    answer = await client.put(
        ORDERS, content=ORDERS_YAML.replace("basePath: /orders", "basePath: orders"), headers=AS_YAML
    )

    assert answer.status_code == 422
    assert [error["path"] for error in answer.json()["errors"]] == ["spec.basePath"]
    assert (await client.get(ORDERS)).json()["spec"]["basePath"] == "/orders"


async def test_yaml_aliases_and_several_documents_are_refused(client: httpx.AsyncClient) -> None:
    aliased = ORDERS_YAML.replace("labels: {team: sales}", "labels: &l {team: sales}\n  annotations: *l")
    several = ORDERS_YAML + "---\n" + ORDERS_YAML

    for body in (aliased, several):
        answer = await client.put(ORDERS, content=body, headers=AS_YAML)
        assert answer.status_code == 400, answer.text
        assert "line" in answer.json()["detail"]
    assert "aliases" in (await client.put(ORDERS, content=aliased, headers=AS_YAML)).json()["detail"]


async def test_a_date_in_yaml_stays_the_text_it_is_written_as(client: httpx.AsyncClient) -> None:
    dated = ORDERS_YAML.replace("labels: {team: sales}", "annotations: {since: 2026-01-31}")

    (await client.put(ORDERS, content=dated, headers=AS_YAML)).raise_for_status()

    assert (await client.get(ORDERS)).json()["metadata"]["annotations"] == {"since": "2026-01-31"}


async def test_a_kept_version_reads_as_yaml_too(client: httpx.AsyncClient) -> None:
    written = (await client.put(ORDERS, content=ORDERS_YAML, headers=AS_YAML)).json()
    revision = written["metadata"]["resourceVersion"]

    answer = await client.get(f"{ORDERS}/history/{revision}", headers={"Accept": "application/yaml"})

    assert answer.status_code == 200
    assert yaml.safe_load(answer.text)["spec"]["basePath"] == "/orders"


async def test_a_body_neither_json_nor_yaml_is_refused_with_415(client: httpx.AsyncClient) -> None:
    answer = await client.put(ORDERS, content=ORDERS_YAML, headers={"Content-Type": "text/plain"})

    assert answer.status_code == 415
    assert "application/yaml" in answer.json()["detail"]
