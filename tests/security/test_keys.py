"""Attacks on API keys and subscriptions: a key outliving its application, a subscription outliving what
it ties together, one digest stored twice, and digests leaking through reads.

Real processes on loopback: the server, an agent with its real certificate, the enforcer, a real Envoy
gateway and an upstream; the REST cases against a real server process.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from meshplane.bulk import delete_file
from meshplane.client import MeshplaneClient
from meshplane.dataplane import ENFORCER_APPLICATION_TYPE
from meshplane.enforcer.decision import Allow, Denial, decide
from meshplane.model.registry import REGISTRY
from meshplane.model.resource import InvalidObject
from meshplane.proto.v1 import enforcer_pb2
from meshplane.server import objects as objects_module
from meshplane.server.objects import ObjectService
from meshplane.server.problems import Problem
from meshplane.store.batch import Fence
from meshplane.store.errors import NotFound
from meshplane.store.store import Store
from meshplane.xds.client import UpdateRejected
from meshplane.xds.resource import pack
from meshplane_testing import documents
from meshplane_testing.enforcer_factories import NOW, check_request, loaded, update
from meshplane_testing.enforcer_factories import api as enforcer_api
from meshplane_testing.enforcer_factories import application as enforcer_application
from meshplane_testing.enforcer_factories import key as enforcer_key
from meshplane_testing.enforcer_factories import subscription as enforcer_subscription
from meshplane_testing.envoy import run_envoy
from meshplane_testing.eventually import eventually
from meshplane_testing.gateway import Gateway, status
from meshplane_testing.meshplane import ServerProcess, run_agent, run_enforcer, run_server
from meshplane_testing.north import put
from meshplane_testing.process import free_port
from meshplane_testing.upstream import run_upstream

pytestmark = pytest.mark.timeout(120)

PROJECT = "default"
SIGNED = {"apiKey": {"header": "x-api-key"}}
OPAQUE = {"apiKey": {"mode": "opaque", "header": "x-api-key"}}


def keys_path(application: str, project: str = PROJECT) -> str:
    return f"/v1/projects/{project}/applications/{application}/keys"


def issue(api: httpx.Client, application: str, project: str = PROJECT, **body: Any) -> dict[str, Any]:
    response = api.post(keys_path(application, project), json=body)
    assert response.status_code == 201, response.text
    return response.json()


def subscribe(api: httpx.Client, application: str, target: str, project: str = PROJECT) -> None:
    spec = {"application": application, "api": target}
    put(api, documents.document("Subscription", f"{application}-{target}", spec=spec, project=project))


def delete(api: httpx.Client, plural: str, name: str, project: str = PROJECT) -> httpx.Response:
    return api.delete(f"/v1/projects/{project}/{plural}/{name}")


@dataclass
class DataPlane:
    server: ServerProcess
    api: httpx.Client
    gateway: Gateway
    agent_admin: str


@pytest.fixture(scope="module")
def data_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DataPlane]:
    """One cluster: agent, enforcer and Envoy, serving a signed-key API and an opaque-key API."""
    tmp = tmp_path_factory.mktemp("keys")
    enforcer_port = free_port()
    with contextlib.ExitStack() as stack:
        port, _ = stack.enter_context(run_upstream("orders"))
        server = stack.enter_context(run_server(tmp))
        agent = stack.enter_context(
            run_agent(tmp, "edge", server, extra=["--enforcer-address", f"127.0.0.1:{enforcer_port}"])
        )
        stack.enter_context(run_enforcer(tmp, agent.xds_port, port=enforcer_port))
        envoy = stack.enter_context(run_envoy(tmp, "gw-edge", agent.xds_port))
        api = stack.enter_context(server.http())
        for name, auth in (("signed", SIGNED), ("opaque", OPAQUE)):
            backends = [{"host": "127.0.0.1", "port": port}]
            put(
                api,
                documents.document(
                    "API", name, spec={"basePath": f"/{name}", "backends": backends, "authentication": auth}
                ),
            )
        envoy.wait_listener(agent.gateway_port)
        gateway = Gateway(agent.gateway_port)
        stack.callback(gateway.close)
        yield DataPlane(server, api, gateway, agent.admin_address)


def test_a_key_of_a_deleted_application_never_works_for_its_namesake(data_plane: DataPlane) -> None:
    api, gateway = data_plane.api, data_plane.gateway
    put(api, documents.document("Application", "mobile", spec={}))
    for target in ("signed", "opaque"):
        subscribe(api, "mobile", target)
    revoked, kept = issue(api, "mobile"), issue(api, "mobile")
    imported = secrets.token_urlsafe(32)
    issue(api, "mobile", key=imported)
    gateway.wait_for("/signed/items", status(200), headers={"x-api-key": kept["key"]}, timeout=30)
    gateway.wait_for("/opaque/items", status(200), headers={"x-api-key": imported}, timeout=30)
    assert api.delete(f"{keys_path('mobile')}/{revoked['id']}").status_code == 200
    gateway.wait_for("/signed/items", status(401), headers={"x-api-key": revoked["key"]})

    for target in ("signed", "opaque"):
        assert delete(api, "subscriptions", f"mobile-{target}").status_code == 200
    assert delete(api, "applications", "mobile").status_code == 200
    put(api, documents.document("Application", "mobile", spec={}))
    for target in ("signed", "opaque"):
        subscribe(api, "mobile", target)
    fresh = issue(api, "mobile")
    gateway.wait_for("/signed/items", status(200), headers={"x-api-key": fresh["key"]}, timeout=30)

    for old in (revoked["key"], kept["key"]):
        answer = gateway.request("GET", "/signed/items", {"x-api-key": old})
        assert answer.status_code == 401, answer.text
    answer = gateway.request("GET", "/opaque/items", {"x-api-key": imported})
    assert answer.status_code == 401, answer.text


def test_a_key_whose_application_is_gone_is_refused_as_a_bad_credential(data_plane: DataPlane) -> None:
    api, gateway = data_plane.api, data_plane.gateway
    put(api, documents.document("Application", "gone", spec={}))
    subscribe(api, "gone", "signed")
    key = issue(api, "gone")["key"]
    gateway.wait_for("/signed/items", status(200), headers={"x-api-key": key}, timeout=30)

    assert delete(api, "subscriptions", "gone-signed").status_code == 200
    assert delete(api, "applications", "gone").status_code == 200

    gateway.wait_for("/signed/items", status(401), headers={"x-api-key": key}, timeout=15)


def test_the_agents_config_dump_shows_no_key_digest(data_plane: DataPlane) -> None:
    api, gateway = data_plane.api, data_plane.gateway
    put(api, documents.document("Application", "dumped", spec={}))
    subscribe(api, "dumped", "opaque")
    keys = [issue(api, "dumped")["key"], secrets.token_urlsafe(32)]
    issue(api, "dumped", key=keys[1])
    gateway.wait_for("/opaque/items", status(200), headers={"x-api-key": keys[1]}, timeout=30)

    dump = httpx.get(f"http://{data_plane.agent_admin}/config_dump", timeout=10).text

    for key in keys:
        digest = hashlib.sha256(key.encode()).digest()
        assert digest.hex() not in dump and base64.b64encode(digest).decode() not in dump
    assert "sha256" not in dump


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("keys-rest")
    with run_server(tmp) as server, server.http() as api:
        for project in ("shop", "rival"):
            created = api.post("/v1/projects", json=documents.project(project))
            assert created.status_code == 201, created.text
            backends = [{"host": "127.0.0.1", "port": 9001}]
            put(
                api,
                documents.document(
                    "API", "orders", spec={"basePath": f"/{project}", "backends": backends}, project=project
                ),
            )
        yield server


@pytest.fixture
def api(server: ServerProcess) -> Iterator[httpx.Client]:
    with server.http() as client:
        yield client


def application(api: httpx.Client, project: str = "shop") -> str:
    name = f"app-{secrets.token_hex(4)}"
    put(api, documents.document("Application", name, spec={}, project=project))
    return name


def test_an_application_with_subscriptions_is_not_deleted_and_the_answer_names_them(api: httpx.Client) -> None:
    app = application(api)
    subscribe(api, app, "orders", "shop")

    refused = delete(api, "applications", app, "shop")

    assert refused.status_code == 409, refused.text
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert f"{app}-orders" in refused.json()["detail"]
    assert api.get(f"/v1/projects/shop/applications/{app}").status_code == 200
    assert api.get(f"/v1/projects/shop/subscriptions/{app}-orders").status_code == 200

    assert delete(api, "subscriptions", f"{app}-orders", "shop").status_code == 200
    assert delete(api, "applications", app, "shop").status_code == 200


def test_an_api_with_subscriptions_is_not_deleted_and_the_answer_names_them(api: httpx.Client) -> None:
    backends = [{"host": "127.0.0.1", "port": 9001}]
    put(
        api,
        documents.document("API", "billing", spec={"basePath": "/billing", "backends": backends}, project="shop"),
    )
    app = application(api)
    subscribe(api, app, "billing", "shop")

    refused = delete(api, "apis", "billing", "shop")

    assert refused.status_code == 409, refused.text
    assert f"{app}-billing" in refused.json()["detail"]
    assert api.get("/v1/projects/shop/apis/billing").status_code == 200

    assert delete(api, "subscriptions", f"{app}-billing", "shop").status_code == 200
    assert delete(api, "apis", "billing", "shop").status_code == 200


def test_delete_of_a_file_removes_subscriptions_before_what_they_name(server: ServerProcess) -> None:
    backends = [{"host": "127.0.0.1", "port": 9001}]
    docs = [
        documents.document("API", "catalog", spec={"basePath": "/catalog", "backends": backends}, project="shop"),
        documents.document("Application", "kiosk", spec={}, project="shop"),
        documents.document(
            "Subscription", "kiosk-catalog", spec={"application": "kiosk", "api": "catalog"}, project="shop"
        ),
    ]
    with server.http() as api:
        for document in docs:
            put(api, document)

    async def remove() -> list[str]:
        async with MeshplaneClient(server.url, token=server.token) as client:
            return [target.label for target in await delete_file(client, docs)]

    deleted = asyncio.run(remove())

    assert len(deleted) == 3
    with server.http() as api:
        for document in docs:
            plural = f"{document['kind'].lower()}s"
            assert api.get(f"/v1/projects/shop/{plural}/{document['metadata']['name']}").status_code == 404


def test_a_key_stored_in_another_project_cannot_be_imported(api: httpx.Client) -> None:
    theirs, mine = application(api, "rival"), application(api, "shop")
    key = secrets.token_urlsafe(32)
    issue(api, theirs, "rival", key=key)

    refused = api.post(keys_path(mine, "shop"), json={"key": key})

    assert refused.status_code == 409, refused.text
    text = refused.text
    assert "rival" not in text and theirs not in text
    assert api.get(keys_path(mine, "shop")).json()["items"] == []


def test_a_key_cannot_be_imported_twice_into_one_application(api: httpx.Client) -> None:
    app = application(api)
    key = secrets.token_urlsafe(32)
    issue(api, app, "shop", key=key)

    again = api.post(keys_path(app, "shop"), json={"key": key})

    assert again.status_code == 409, again.text
    assert len(api.get(keys_path(app, "shop")).json()["items"]) == 1


def test_concurrent_imports_of_one_key_store_exactly_one(server: ServerProcess, api: httpx.Client) -> None:
    targets = [("shop", application(api, "shop")) for _ in range(4)]
    targets += [("rival", application(api, "rival")) for _ in range(4)]
    key = secrets.token_urlsafe(32)

    async def import_everywhere() -> list[int]:
        async with httpx.AsyncClient(base_url=server.url, headers=server.headers, timeout=20) as client:
            calls = [client.post(keys_path(app, project), json={"key": key}) for project, app in targets * 2]
            return [response.status_code for response in await asyncio.gather(*calls)]

    codes = asyncio.run(import_everywhere())

    assert sorted(codes) == [201] + [409] * (len(codes) - 1), codes
    stored = sum(len(api.get(keys_path(app, project)).json()["items"]) for project, app in targets)
    assert stored == 1


def test_a_fleet_wide_viewer_reads_a_clusters_resources_without_key_digests(
    server: ServerProcess, api: httpx.Client
) -> None:
    cluster = documents.cluster("audited")
    assert api.put("/v1/clusters/audited", json=cluster).status_code in (200, 201)
    app = application(api)
    imported = secrets.token_urlsafe(32)
    keys = [issue(api, app, "shop")["key"], issue(api, app, "shop", key=imported)["key"]]
    digests = [hashlib.sha256(key.encode()).hexdigest() for key in keys]
    viewer = api.post("/v1/tokens", json={"name": "auditor", "role": "viewer"})
    assert viewer.status_code == 201, viewer.text

    with httpx.Client(base_url=server.url, headers={"authorization": f"Bearer {viewer.json()['token']}"}) as reader:
        listing = wait_for_keys(reader, "audited", app, 2)
        as_yaml = reader.get("/v1/clusters/audited/resources", params={"output": "yaml"})

    assert as_yaml.status_code == 200
    shown = json.dumps(listing) + as_yaml.text
    assert not any(digest in shown for digest in digests)
    assert all("sha256" not in item["object"]["spec"] for item in key_items(listing, app))


def key_items(listing: dict[str, Any], application: str) -> list[dict[str, Any]]:
    return [
        item
        for item in listing["items"]
        if item["object"]["kind"] == "ApplicationKey" and item["object"]["spec"]["application"] == application
    ]


def wait_for_keys(reader: httpx.Client, cluster: str, application: str, count: int) -> dict[str, Any]:
    """The cluster's resources once its projection holds `count` key records of `application`."""

    def holding() -> httpx.Response | None:
        response = reader.get(f"/v1/clusters/{cluster}/resources")
        assert response.status_code == 200, response.text
        return response if len(key_items(response.json(), application)) >= count else None

    response = eventually(holding, timeout=15, interval=0.1, what=f"{count} keys of {application} on {cluster}")
    assert len(key_items(response.json(), application)) == count, response.text
    return response.json()


MOBILE_CALL = check_request(headers={"x-api-key": "mobile-key"})
WEB_CALL = check_request(headers={"x-api-key": "web-key"})
ENFORCED = (
    enforcer_api("shop/orders"),
    enforcer_application("shop/mobile", enforcer_key("mobile-key", "k1")),
    enforcer_subscription("shop/mobile-orders", "mobile", "orders"),
    enforcer_subscription("shop/web-orders", "web", "orders"),
)


async def test_the_enforcer_takes_an_update_whose_one_application_shares_a_digest() -> None:
    state = await loaded(*ENFORCED)
    web = enforcer_application("shop/web", enforcer_key("web-key", "w1"))
    twin = enforcer_application("rival/copycat", enforcer_key("mobile-key", "c1"))

    with pytest.raises(UpdateRejected) as reported:
        await state.apply(update(ENFORCER_APPLICATION_TYPE, web, twin))

    assert "rival/copycat" in str(reported.value)
    assert isinstance(decide(state.snapshot, WEB_CALL, NOW), Allow)
    assert decide(state.snapshot, MOBILE_CALL, NOW) is Denial.INVALID_KEY  # whose key it is cannot be told

    await state.apply(update(ENFORCER_APPLICATION_TYPE, removed=["rival/copycat"]))

    decision = decide(state.snapshot, MOBILE_CALL, NOW)
    assert isinstance(decision, Allow) and decision.key.application == "mobile"


async def test_the_enforcer_takes_an_update_around_a_malformed_entry() -> None:
    state = await loaded(*ENFORCED)
    web = enforcer_application("shop/web", enforcer_key("web-key", "w1"))
    broken = enforcer_pb2.EnforcerApplication(project="shop", name="broken", keys=[enforcer_pb2.KeyDigest(id="b1")])

    with pytest.raises(UpdateRejected) as reported:
        await state.apply(update(ENFORCER_APPLICATION_TYPE, web, pack("shop/broken", broken)))

    assert "shop/broken" in str(reported.value)
    assert isinstance(decide(state.snapshot, WEB_CALL, NOW), Allow)
    assert isinstance(decide(state.snapshot, MOBILE_CALL, NOW), Allow)
    assert "shop/broken" not in state.versions(ENFORCER_APPLICATION_TYPE)


async def stored_project(store: Store) -> ObjectService:
    service = ObjectService(store)
    await service.create(REGISTRY.get("Project"), None, documents.project("shop"))
    for kind, name, spec in (
        ("Application", "mobile", {}),
        ("API", "orders", {"basePath": "/orders", "backends": [{"host": "127.0.0.1", "port": 9001}]}),
    ):
        await service.create(REGISTRY.get(kind), "shop", documents.document(kind, name, spec=spec, project="shop"))
    return service


SUBSCRIPTION = documents.document(
    "Subscription", "mobile-orders", spec={"application": "mobile", "api": "orders"}, project="shop"
)


@pytest.mark.parametrize("gone", ["Application", "API"])
async def test_a_subscription_whose_application_or_api_goes_after_its_check_is_not_stored(
    store: Store, monkeypatch: pytest.MonkeyPatch, gone: str
) -> None:
    service = await stored_project(store)
    checked = objects_module.check_access

    async def check_then_lose(*args: Any) -> int | None:
        seen = await checked(*args)
        with contextlib.suppress(NotFound):
            await store.delete(gone, "shop", "mobile" if gone == "Application" else "orders")
        return seen

    monkeypatch.setattr(objects_module, "check_access", check_then_lose)

    with pytest.raises(InvalidObject) as refused:
        await service.create(REGISTRY.get("Subscription"), "shop", SUBSCRIPTION)

    assert [error.path for error in refused.value.errors] == [f"spec.{gone.lower()}"]
    assert (await store.list("Subscription", "shop"))[0] == []


@pytest.mark.parametrize("kind", ["Application", "API"])
async def test_a_subscription_landing_after_a_deletes_look_refuses_the_delete(
    store: Store, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    service = await stored_project(store)
    looked = objects_module.refuse_referenced
    landed = []

    async def look_then_land(*args: Any) -> Fence | None:
        fence = await looked(*args)
        if not landed:
            landed.append(await store.create("Subscription", "shop", "mobile-orders", spec=SUBSCRIPTION["spec"]))
        return fence

    monkeypatch.setattr(objects_module, "refuse_referenced", look_then_land)

    with pytest.raises(Problem) as refused:
        await service.delete(REGISTRY.get(kind), "shop", "mobile" if kind == "Application" else "orders")

    assert refused.value.status == 409 and "mobile-orders" in refused.value.detail
    assert await store.get(kind, "shop", "mobile" if kind == "Application" else "orders")
