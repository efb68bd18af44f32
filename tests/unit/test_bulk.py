"""A file applied or deleted: what others name is stored first and removed last, a wave's documents go together
(at most so many at once), what is shown keeps the file's order, and the first refusal stops what is not yet
sent."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import httpx
import pytest

from meshplane.bulk import FileRefused, apply_file, bounded, delete_file, waves
from meshplane.client import ApiError, MeshplaneClient
from meshplane.model.registry import REGISTRY, UnknownKind

pytestmark = pytest.mark.timeout(30)


def doc(kind: str, name: str, project: str | None = "shop", **spec: Any) -> dict[str, Any]:
    metadata = {"name": name, **({"project": project} if project else {})}
    return {"kind": kind, "metadata": metadata, "spec": spec}


def labels(planned: list[list[Any]]) -> list[list[str]]:
    return [[target.label for target, _ in wave] for wave in planned]


def test_a_kind_comes_after_every_kind_it_names() -> None:
    for info in REGISTRY:
        named = [*info.names, *(["Project"] if info.namespaced else [])]
        assert all(REGISTRY.depth(REGISTRY.get(kind)) < REGISTRY.depth(info) for kind in named), info.kind
    assert [REGISTRY.depth(REGISTRY.get(k)) for k in ("Project", "API", "Subscription", "IngressIntent")] == [
        0,
        1,
        2,
        3,
    ]


def test_waves_store_what_is_named_first_and_keep_file_order_within_a_wave() -> None:
    docs = [
        doc("Subscription", "s", application="app", api="orders"),
        doc("API", "orders"),
        doc("Project", "shop", project=None),
        doc("Application", "app"),
        doc("API", "carts"),
    ]

    planned = waves(docs, None)

    assert labels(planned) == [
        ["projects/shop"],
        ["apis/orders -p shop", "applications/app -p shop", "apis/carts -p shop"],
        ["subscriptions/s -p shop"],
    ]


def test_a_second_document_for_one_object_goes_after_the_first() -> None:
    first, second = doc("API", "orders", basePath="/v1"), doc("API", "orders", basePath="/v2")

    planned = waves([first, doc("API", "orders", project="other"), second], None)

    assert [[d for _, d in wave] for wave in planned] == [[first, doc("API", "orders", project="other")], [second]]


def test_documents_without_a_project_take_the_one_given_else_default() -> None:
    assert labels(waves([doc("API", "a", project=None)], "shop")) == [["apis/a -p shop"]]
    assert labels(waves([doc("API", "a", project=None)], None)) == [["apis/a -p default"]]


@pytest.mark.parametrize(
    ("bad", "raised"),
    [({"metadata": {"name": "x"}}, ApiError), (doc("API", ""), ApiError), (doc("Gadget", "g"), UnknownKind)],
)
def test_an_unplaceable_document_fails_the_plan_before_anything_is_sent(bad: dict[str, Any], raised: type) -> None:
    with pytest.raises(raised) as caught:
        waves([doc("Project", "shop", project=None), bad], None)

    assert ("document 2" if raised is ApiError else "Gadget") in str(caught.value)


class FakeServer:
    """Answers after a random pause: 422 for the names in `refuse`, 404 to a DELETE of the names in `gone`, else
    success. Records every (method, path) and the most requests it had in flight at once."""

    def __init__(self, refuse: tuple[str, ...] = (), gone: tuple[str, ...] = ()):
        self.refuse, self.gone = set(refuse), set(gone)
        self.in_flight = 0
        self.most_in_flight = 0
        self.calls: list[tuple[str, str]] = []

    @property
    def paths(self) -> list[str]:
        return [path for _, path in self.calls]

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        name = request.url.path.rsplit("/", 1)[-1]
        self.calls.append((request.method, request.url.path))
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(random.uniform(0, 0.01))
        finally:
            self.in_flight -= 1
        if name in self.refuse:
            problem = {"detail": "the object is not valid", "errors": [{"path": "spec", "message": "no"}]}
            return httpx.Response(422, json=problem)
        if request.method == "DELETE":
            if name in self.gone:
                return httpx.Response(404, json={"detail": f"{name} not found"})
            return httpx.Response(200, json={"metadata": {"name": name}})
        return httpx.Response(201, json=json.loads(request.content))


def client_of(server: FakeServer) -> MeshplaneClient:
    client = MeshplaneClient("http://meshplane.test")
    client.http = httpx.AsyncClient(base_url="http://meshplane.test", transport=httpx.MockTransport(server))
    return client


async def test_apply_sends_a_wave_together_at_most_so_many_at_once_and_shows_it_in_file_order() -> None:
    server = FakeServer()
    docs = [doc("Project", "shop", project=None), *(doc("API", f"api-{i}") for i in range(40))]
    shown: list[str] = []

    async with client_of(server) as client:
        applied = await apply_file(client, docs, on_applied=lambda done: shown.append(done.name), concurrency=8)

    assert shown == ["shop", *(f"api-{i}" for i in range(40))]
    assert [done.name for done in applied] == shown
    assert server.most_in_flight == 8
    assert server.paths[0] == "/v1/projects/shop"


async def test_a_refusal_stops_the_apply_before_the_next_wave_and_names_what_was_refused() -> None:
    server = FakeServer(refuse=("bad-1", "bad-2"))
    docs = [
        doc("Subscription", "s", application="app", api="good"),
        doc("API", "good"),
        doc("API", "bad-1"),
        doc("API", "bad-2"),
    ]
    shown: list[str] = []

    async with client_of(server) as client:
        with pytest.raises(FileRefused) as failed:
            await apply_file(client, docs, on_applied=lambda done: shown.append(done.name), concurrency=4)

    assert failed.value.status == 422
    message = str(failed.value)
    assert message.splitlines()[0] == "apis/bad-1 -p shop: 422: the object is not valid"
    assert "apis/bad-2 -p shop: 422" in message
    assert message.splitlines()[-1] == "1 more document not sent"
    assert shown == ["good"]
    assert not any("subscriptions" in path for path in server.paths)


async def test_once_refused_an_apply_sends_nothing_more_of_the_wave() -> None:
    server = FakeServer(refuse=("api-0",))
    docs = [doc("API", f"api-{i}") for i in range(20)]

    async with client_of(server) as client:
        with pytest.raises(FileRefused) as failed:
            await apply_file(client, docs, concurrency=1)

    assert server.paths == ["/v1/projects/shop/apis/api-0"]
    assert str(failed.value).splitlines()[-1] == "19 more documents not sent"


SHOP = [
    doc("Project", "shop", project=None),
    doc("API", "orders"),
    doc("Subscription", "s", application="app", api="orders"),
    doc("Application", "app"),
]


async def test_delete_removes_what_names_others_first_and_projects_last() -> None:
    server = FakeServer()
    shown: list[str] = []

    async with client_of(server) as client:
        deleted = await delete_file(client, SHOP, on_deleted=lambda target: shown.append(target.label))

    first, *middle, last = server.paths
    assert (first, last) == ("/v1/projects/shop/subscriptions/s", "/v1/projects/shop")
    assert set(middle) == {"/v1/projects/shop/apis/orders", "/v1/projects/shop/applications/app"}
    assert all(method == "DELETE" for method, _ in server.calls)
    assert (
        shown
        == [target.label for target in deleted]
        == [
            "subscriptions/s -p shop",
            "apis/orders -p shop",
            "applications/app -p shop",
            "projects/shop",
        ]
    )


async def test_delete_may_pass_over_objects_already_gone() -> None:
    server = FakeServer(gone=("orders",))
    shown: list[str] = []

    async with client_of(server) as client:
        await delete_file(client, SHOP, on_deleted=lambda target: shown.append(target.name), ignore_not_found=True)

    assert shown == ["s", "app", "shop"]


async def test_delete_stops_at_an_object_already_gone_unless_told_otherwise() -> None:
    server = FakeServer(gone=("orders",))

    async with client_of(server) as client:
        with pytest.raises(FileRefused) as failed:
            await delete_file(client, SHOP)

    assert failed.value.status == 404
    assert str(failed.value).splitlines() == ["apis/orders -p shop: 404: orders not found", "1 more document not sent"]
    assert "/v1/projects/shop" not in server.paths


async def test_bounded_keeps_the_calls_order_and_runs_at_most_so_many_at_once() -> None:
    running = most = 0

    async def call(number: int) -> int:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(random.uniform(0, 0.005))
        running -= 1
        return number

    assert await bounded((call(n) for n in range(30)), concurrency=4) == list(range(30))
    assert most == 4
