"""What a token bound to project `shop` can learn of project `bank` through the north API: nothing.

A real server holds both projects, with APIs placed on cluster `edge-1` that fail there (reported with
that cluster's certificate); a shop viewer and a shop publisher then read, list, page, clash and watch.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from meshplane.proto.v1 import control_plane_pb2, control_plane_pb2_grpc
from meshplane_testing import documents
from meshplane_testing.eventually import eventually
from meshplane_testing.meshplane import ServerProcess, run_server
from meshplane_testing.sync_probe import API_TYPE, SyncProbe

pytestmark = pytest.mark.timeout(120)

CLUSTER = "edge-1"
SECRETS = ("bank", "vault", "teller")
"""Words of project bank (its name and its APIs' names) that no shop token may ever receive."""


def api(project: str, name: str, base_path: str) -> dict[str, Any]:
    return documents.api(
        name,
        project=project,
        basePath=base_path,
        backends=[documents.backend(9001, host="10.1.2.3")],
        placement={"clusters": [CLUSTER]},
    )


def put(http: httpx.Client, doc: dict[str, Any], headers: dict[str, str] | None = None) -> httpx.Response:
    meta = doc["metadata"]
    return http.put(f"/v1/projects/{meta['project']}/apis/{meta['name']}", json=doc, headers=headers)


def last_error(server: ServerProcess) -> str:
    with server.http() as http:
        return http.get(f"/v1/clusters/{CLUSTER}").json().get("status", {}).get("lastError") or ""


async def fail_on_cluster(server: ServerProcess, probe: SyncProbe, name: str, message: str) -> None:
    """Report, as edge-1's agent would, that the gateways rejected the held version of API `name`."""
    version = probe.held[API_TYPE][name]
    delivery = control_plane_pb2.ObjectDelivery(
        type_url=API_TYPE, name=name, version=version, state=control_plane_pb2.FAILED, message=message
    )
    async with grpc.aio.secure_channel(server.grpc_address, server.agent_credentials(CLUSTER)) as channel:
        await control_plane_pb2_grpc.ControlPlaneStub(channel).ReportStatus(
            control_plane_pb2.ReportStatusRequest(cluster=CLUSTER, idempotency_key=name, deliveries=[delivery]),
            timeout=10,
        )


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Projects bank and shop, each with APIs failing on edge-1 (bank's failure the newest), and shop tokens."""
    with run_server(tmp_path_factory.mktemp("north-leaks")) as server:
        probe = SyncProbe(server.grpc_address, CLUSTER, credentials=server.agent_credentials(CLUSTER))
        asyncio.run(probe.register())
        with server.http() as http:
            for project in ("bank", "shop"):
                created = http.post("/v1/projects", json=documents.project(project))
                assert created.status_code == 201, created.text
            for doc in (
                api("bank", "vault", "/ledger"),
                api("bank", "teller", "/teller"),
                api("shop", "orders", "/orders"),
                api("shop", "payments", "/payments"),
                api("shop", "refunds", "/refunds"),
            ):
                assert put(http, doc).status_code == 201
        wanted = {"bank/vault", "shop/orders"}
        asyncio.run(probe.sync_until(lambda p: wanted <= p.names()))
        asyncio.run(fail_on_cluster(server, probe, "shop/orders", "shop's regex is too large"))
        eventually(
            lambda: "shop/orders" in last_error(server), timeout=15, what="shop's failure in the cluster's status"
        )
        asyncio.run(fail_on_cluster(server, probe, "bank/vault", "bank vault backend refused"))
        eventually(
            lambda: "bank/vault" in last_error(server), timeout=15, what="bank's failure in the cluster's status"
        )
        yield {
            "server": server,
            "viewer": server.bearer("viewer", "shop"),
            "publisher": server.bearer("publisher", "shop"),
        }


def client(world: dict[str, Any], who: str) -> httpx.Client:
    server: ServerProcess = world["server"]
    return httpx.Client(base_url=server.url, headers=world[who], timeout=10)


def assert_nothing_of_bank(text: str) -> None:
    leaked = [word for word in SECRETS if word in text]
    assert not leaked, f"{leaked} in {text}"


def test_a_shop_token_sees_no_cluster_error_about_banks_objects(world: dict[str, Any]) -> None:
    with client(world, "viewer") as http:
        listed = http.get("/v1/clusters")
        one = http.get(f"/v1/clusters/{CLUSTER}")
        resources = http.get(f"/v1/clusters/{CLUSTER}/resources")
    assert (listed.status_code, one.status_code, resources.status_code) == (200, 200, 403)
    assert_nothing_of_bank(listed.text)
    assert_nothing_of_bank(one.text)
    status = one.json()["status"]
    assert "shop/orders" in status["lastError"], status
    assert status["outOfDate"] == 3, status  # shop's three APIs, not bank's two nor the fleet's key set
    assert last_error(world["server"]).startswith("API bank/vault: ")  # a fleet-wide token sees every project


def _decoded(token: str) -> bytes:
    return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))


def _walk(http: httpx.Client, path: str) -> tuple[list[str], list[str]]:
    """Every page of a list with limit=1: the names listed and the continue tokens given."""
    names, tokens, token = [], [], None
    for _ in range(20):
        page = http.get(path, params={"limit": 1, **({"continue": token} if token else {})})
        assert page.status_code == 200, page.text
        names += [item["metadata"]["name"] for item in page.json()["items"]]
        token = page.json()["metadata"].get("continue")
        if token is None:
            return names, tokens
        tokens.append(token)
    raise AssertionError(f"{path} did not end")


def test_continue_tokens_reveal_no_names_and_pages_hold_only_the_callers_projects(world: dict[str, Any]) -> None:
    with client(world, "viewer") as http:
        projects, project_tokens = _walk(http, "/v1/projects")
        apis, api_tokens = _walk(http, "/v1/projects/shop/apis")
    assert projects == ["shop"]
    assert apis == ["orders", "payments", "refunds"]
    assert api_tokens
    for token in project_tokens + api_tokens:
        for word in (*SECRETS, "shop", "default", "orders", "payments", "refunds"):
            assert word.encode() not in _decoded(token), (word, token)
            assert word not in token


def test_a_forged_or_altered_continue_token_is_400(world: dict[str, Any]) -> None:
    forged = base64.urlsafe_b64encode(json.dumps(["shop", "a"]).encode()).decode()
    with client(world, "viewer") as http:
        page = http.get("/v1/projects/shop/apis", params={"limit": 1})
        real = page.json()["metadata"]["continue"]
        flipped = real[:10] + ("A" if real[10] != "A" else "B") + real[11:]
        answers = [
            http.get("/v1/projects/shop/apis", params={"limit": 1, "continue": token})
            for token in (forged, flipped, "not a token", real[:-4])
        ]
        elsewhere = http.get("/v1/projects", params={"limit": 1, "continue": real})
        resumed = http.get("/v1/projects/shop/apis", params={"limit": 1, "continue": real})
    for answer in (*answers, elsewhere):
        assert answer.status_code == 400, answer.text
        assert answer.headers["content-type"] == "application/problem+json"
    assert [item["metadata"]["name"] for item in resumed.json()["items"]] == ["payments"]


def test_a_route_clash_with_banks_api_names_neither_it_nor_its_project(world: dict[str, Any]) -> None:
    with client(world, "publisher") as http:
        theirs = put(http, api("shop", "mirror", "/ledger"))
        ours = put(http, api("shop", "orders-again", "/orders"))
    assert theirs.status_code == 409, theirs.text
    assert_nothing_of_bank(theirs.json()["detail"])
    assert "another project" in theirs.json()["detail"]
    assert ours.status_code == 409, ours.text
    assert "shop/orders" in ours.json()["detail"]


def test_the_watch_stream_of_a_shop_token_carries_no_bank_event(world: dict[str, Any]) -> None:
    server: ServerProcess = world["server"]
    lines: list[str] = []
    with client(world, "viewer") as http, http.stream("GET", "/v1/watch", params={"since": 0}) as stream:
        with server.http() as admin:
            assert put(admin, api("bank", "vault", "/ledger-v2")).status_code == 200
            marker = documents.application("marker", project="shop")
            assert admin.put("/v1/projects/shop/applications/marker", json=marker).status_code == 201
        deadline = time.monotonic() + 20
        for line in stream.iter_lines():
            lines.append(line)
            if '"marker"' in line or time.monotonic() > deadline:
                break
    assert any('"marker"' in line for line in lines), lines
    assert any('"orders"' in line for line in lines)
    assert_nothing_of_bank("\n".join(lines))


def test_a_shop_token_reads_nothing_of_bank(world: dict[str, Any]) -> None:
    with client(world, "viewer") as http:
        answers = [
            http.get("/v1/projects/bank"),
            http.get("/v1/projects/bank/apis"),
            http.get("/v1/projects/bank/apis/vault"),
            http.get("/v1/watch", params={"project": "bank"}),
        ]
    for answer in answers:
        assert answer.status_code == 404, answer.text


def test_tokens_issued_by_one_server_page_on_another_over_the_same_store(tmp_path: Path) -> None:
    """Replicas share the store, not a data directory: a token one of them issued resumes on another."""
    with run_server(tmp_path, name="first") as first, first.http() as http:
        for name in ("a1", "a2", "a3"):
            doc = api("default", name, f"/{name}")
            assert put(http, doc).status_code == 201
        token = http.get("/v1/projects/default/apis", params={"limit": 1}).json()["metadata"]["continue"]
        admin = first.headers
    database = f"sqlite+aiosqlite:///{(tmp_path / 'first' / 'meshplane.db').resolve()}"
    with (
        run_server(tmp_path, database_url=database, name="second") as second,
        httpx.Client(base_url=second.url, headers=admin, timeout=10) as http,
    ):
        page = http.get("/v1/projects/default/apis", params={"limit": 1, "continue": token})
    assert page.status_code == 200, page.text
    assert [item["metadata"]["name"] for item in page.json()["items"]] == ["a2"]
