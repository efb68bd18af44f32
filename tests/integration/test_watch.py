"""`GET /v1/watch` against a real server process: Server-Sent Events over HTTP, every read bounded in time."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from httpx_sse import connect_sse

from meshplane_testing.documents import api
from meshplane_testing.meshplane import ServerProcess

pytestmark = pytest.mark.timeout(60)

READ_TIMEOUT = 5.0
"""Longest wait for one event; a missing event fails the test instead of hanging it."""


class Watch:
    """An open watch stream, read one change at a time."""

    def __init__(self, events: Iterator[Any]):
        self._events = events

    def next(self) -> dict[str, Any]:
        """The next change; httpx.ReadTimeout if none comes within READ_TIMEOUT."""
        for event in self._events:
            if event.data:
                change = json.loads(event.data)
                assert event.event == change["type"]
                assert event.id == str(change["revision"])
                return change
        raise AssertionError("the watch stream ended")

    def next_for(self, name: str) -> dict[str, Any]:
        """The next change of the object called `name`, skipping other objects' (from earlier tests)."""
        while (change := self.next())["object"]["metadata"]["name"] != name:
            pass
        return change


@pytest.fixture
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with server.http(timeout=httpx.Timeout(10.0, read=READ_TIMEOUT)) as client:
        yield client


@contextlib.contextmanager
def watching(http: httpx.Client, **params: Any) -> Iterator[Watch]:
    """A watch whose starting revision the server has fixed by the time this yields (the headers are in)."""
    with connect_sse(http, "GET", "/v1/watch", params=params) as source:
        assert source.response.status_code == 200
        yield Watch(source.iter_sse())


def current_revision(http: httpx.Client) -> int:
    return int(http.get("/v1/projects").json()["metadata"]["resourceVersion"])


def test_watch_from_zero_shows_added_modified_deleted_in_revision_order(http: httpx.Client) -> None:
    with watching(http, since=0) as watch:
        assert http.put("/v1/projects/default/apis/orders", json=api("orders")).status_code == 201
        added = watch.next_for("orders")
        assert http.patch("/v1/projects/default/apis/orders", json={"metadata": {"labels": {"a": "b"}}}).is_success
        modified = watch.next_for("orders")
        assert http.delete("/v1/projects/default/apis/orders").status_code == 200
        deleted = watch.next_for("orders")

    assert [added["type"], modified["type"], deleted["type"]] == ["ADDED", "MODIFIED", "DELETED"]
    assert added["revision"] < modified["revision"] < deleted["revision"]
    assert added["object"]["spec"]["basePath"] == "/orders"
    assert modified["object"]["metadata"]["labels"] == {"a": "b"}
    assert deleted["object"]["kind"] == "API"
    assert deleted["object"]["spec"]["basePath"] == "/orders"
    for change in (added, modified, deleted):
        assert change["object"]["metadata"]["resourceVersion"] == str(change["revision"])


def test_watch_from_zero_replays_existing_objects_first(http: httpx.Client) -> None:
    with watching(http, since=0) as watch:
        first = watch.next()

    assert (first["type"], first["object"]["kind"], first["object"]["metadata"]["name"]) == (
        "ADDED",
        "Project",
        "default",
    )


def test_watch_of_one_kind_leaves_out_other_kinds(http: httpx.Client) -> None:
    with watching(http, since=current_revision(http), kind="apis") as watch:
        project = http.put("/v1/projects/shop", json={"kind": "Project", "metadata": {"name": "shop"}, "spec": {}})
        http.put("/v1/projects/default/apis/filtered", json=api("filtered"))
        change = watch.next()

    assert (change["object"]["kind"], change["object"]["metadata"]["name"]) == ("API", "filtered")
    assert change["revision"] > int(project.json()["metadata"]["resourceVersion"])


def test_watch_from_the_current_revision_shows_only_new_changes(http: httpx.Client) -> None:
    http.put("/v1/projects/default/apis/before", json=api("before"))

    with watching(http, since=current_revision(http)) as watch:
        http.put("/v1/projects/default/apis/after", json=api("after"))
        change = watch.next()

    assert (change["type"], change["object"]["metadata"]["name"]) == ("ADDED", "after")


def test_watch_from_a_future_revision_shows_new_changes_from_now(http: httpx.Client) -> None:
    with watching(http, since=current_revision(http) + 1_000_000) as watch:
        http.put("/v1/projects/default/apis/future", json=api("future"))
        change = watch.next()

    assert (change["type"], change["object"]["metadata"]["name"]) == ("ADDED", "future")


def test_late_watcher_sees_each_object_only_in_its_latest_state(http: httpx.Client) -> None:
    http.put("/v1/projects/default/apis/late", json=api("late"))
    http.patch("/v1/projects/default/apis/late", json={"metadata": {"labels": {"x": "y"}}})
    http.delete("/v1/projects/default/apis/late")
    marker = http.put("/v1/projects/default/apis/late-marker", json=api("late-marker")).json()

    with watching(http, since=0, kind="API") as watch:
        seen = []
        while (change := watch.next())["object"]["metadata"]["name"] != "late-marker":
            seen.append((change["type"], change["object"]["metadata"]["name"]))

    assert [event for event in seen if event[1] == "late"] == [("DELETED", "late")]
    assert change["revision"] == int(marker["metadata"]["resourceVersion"])


def test_watch_of_an_unknown_kind_is_refused_with_400(http: httpx.Client) -> None:
    response = http.get("/v1/watch", params={"kind": "bogus"})

    assert response.status_code == 400
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["errors"][0]["path"] == "kind"
