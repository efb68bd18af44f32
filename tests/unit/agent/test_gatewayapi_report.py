"""Which routes go up and when: those attached to a Gateway of ours, each once per version (labels, spec, our
parents entries), reported deleted when gone or detached; a refusal said once per namespace and reason."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from google.protobuf import json_format
from structlog.testing import capture_logs

from meshplane.agent.kube.gatewayapi_report import WHOLE, RouteReport, parent_gateways
from meshplane.agent.state import LocalState
from meshplane.gatewayapi.state import CONTROLLER_NAME
from meshplane.proto.v1 import control_plane_pb2

CLASS = {("", "ours"): {"metadata": {"name": "ours"}, "spec": {"controllerName": CONTROLLER_NAME}}}
THEIR_CLASS = {("", "theirs"): {"metadata": {"name": "theirs"}, "spec": {"controllerName": "example.com/other"}}}
GATEWAYS = {
    ("shop", "edge"): {"metadata": {"namespace": "shop", "name": "edge"}, "spec": {"gatewayClassName": "ours"}},
    ("shop", "other"): {"metadata": {"namespace": "shop", "name": "other"}, "spec": {"gatewayClassName": "theirs"}},
}


def route(name: str, gateway: str = "edge", namespace: str = "shop", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": namespace, "name": name, "labels": {"team": "a"}},
        "spec": {"parentRefs": [{"name": gateway, "namespace": "shop"}], "rules": []},
        "status": status,
    }


def objects(http: dict | None = None, grpc: dict | None = None, listed: frozenset[str] = WHOLE) -> Any:
    """The Gateway API watch as the report reads it, every kind listed unless `listed` says otherwise."""
    held = {
        "gateway_classes": {**CLASS, **THEIR_CLASS},
        "gateways": GATEWAYS,
        "http_routes": http or {},
        "grpc_routes": grpc or {},
    }
    return SimpleNamespace(objects=held, listed=set(listed))


class Memory:
    """The agent's state as the report keeps its routes in it."""

    def __init__(self, routes: frozenset[tuple[str, str, str]] = frozenset()) -> None:
        self.reported_routes = routes

    async def keep_reported_routes(self, routes: frozenset[tuple[str, str, str]]) -> None:
        self.reported_routes = routes


class Reports:
    def __init__(self) -> None:
        self.sent: list[control_plane_pb2.LocalObject] = []

    async def __call__(self, batch: list[control_plane_pb2.LocalObject]) -> None:
        assert len(batch) == 1  # each route on its own: a refused one holds back no other
        self.sent.extend(batch)

    def taken(self) -> list[tuple[str, str, bool]]:
        out = [(local.kind, local.name, local.deleted) for local in self.sent]
        self.sent.clear()
        return out


@pytest.fixture
def reports() -> Reports:
    return Reports()


async def test_only_routes_attached_to_a_gateway_of_ours_are_reported(reports: Reports) -> None:
    report = RouteReport(reports, Memory())

    await report.seen(
        objects({("shop", "a"): route("a"), ("shop", "b"): route("b", "other")}, {("shop", "g"): route("g")})
    )

    assert reports.taken() == [("GRPCRoute", "g", False), ("HTTPRoute", "a", False)]


async def test_a_route_goes_up_with_its_spec_labels_and_our_parents_entries_alone(reports: Reports) -> None:
    ours = {"parentRef": {"name": "edge"}, "controllerName": CONTROLLER_NAME, "conditions": []}
    theirs = {"parentRef": {"name": "other"}, "controllerName": "example.com/other", "conditions": []}

    await RouteReport(reports, Memory()).seen(objects({("shop", "a"): route("a", parents=[theirs, ours])}))

    (local,) = reports.sent
    assert (local.project, dict(local.labels)) == ("shop", {"team": "a"})
    assert json_format.MessageToDict(local.spec)["parentRefs"] == [{"name": "edge", "namespace": "shop"}]
    assert json_format.MessageToDict(local.status) == {"parents": [ours]}


async def test_a_version_is_reported_once_and_again_when_our_status_changes(reports: Reports) -> None:
    report = RouteReport(reports, Memory())
    await report.seen(objects({("shop", "a"): route("a")}))
    reports.taken()

    await report.seen(objects({("shop", "a"): route("a", parents=[{"controllerName": "example.com/other"}])}))
    assert reports.taken() == []

    await report.seen(objects({("shop", "a"): route("a", parents=[{"controllerName": CONTROLLER_NAME}])}))
    assert reports.taken() == [("HTTPRoute", "a", False)]


async def test_a_route_deleted_or_detached_from_our_gateways_is_reported_deleted(reports: Reports) -> None:
    report = RouteReport(reports, Memory())
    await report.seen(objects({("shop", "a"): route("a"), ("shop", "b"): route("b")}))
    reports.taken()

    await report.seen(objects({("shop", "b"): route("b", "other")}))

    assert reports.taken() == [("HTTPRoute", "a", True), ("HTTPRoute", "b", True)]
    await report.seen(objects({("shop", "b"): route("b", "other")}))
    assert reports.taken() == []


async def test_a_refusal_is_said_once_per_namespace_and_reason() -> None:
    report = RouteReport(Reports(), Memory())
    why = "cluster edge-1 may not publish into project 'closed'"
    first = control_plane_pb2.LocalObject(kind="HTTPRoute", project="closed", name="a")
    second = control_plane_pb2.LocalObject(kind="HTTPRoute", project="closed", name="b")

    with capture_logs() as logs:
        await report.refused([first], f"HTTPRoute closed/a: {why}")
        await report.refused([second], f"HTTPRoute closed/b: {why}")
        await report.refused([first], f"HTTPRoute closed/a: {why}")

    assert [(entry["project"], entry["name"]) for entry in logs] == [("closed", "a")]


async def test_a_route_reported_before_a_restart_and_gone_since_is_reported_deleted_once_all_is_listed(
    reports: Reports,
) -> None:
    memory = Memory(frozenset({("HTTPRoute", "shop", "gone"), ("HTTPRoute", "shop", "kept")}))
    report = RouteReport(reports, memory)
    kept = {("shop", "kept"): route("kept")}

    await report.seen(objects(kept, listed=WHOLE - {"grpc_routes"}))
    assert reports.taken() == [("HTTPRoute", "kept", False)]  # its version was not known: sent again

    await report.seen(objects(kept))
    assert reports.taken() == [("HTTPRoute", "gone", True)]
    assert memory.reported_routes == {("HTTPRoute", "shop", "kept")}


async def test_the_local_state_keeps_the_reported_routes_across_a_restart(tmp_path: Path) -> None:
    state = await LocalState.open(tmp_path)
    await state.keep_reported_routes(frozenset({("GRPCRoute", "shop", "greeter")}))
    await state.close()

    reopened = await LocalState.open(tmp_path)
    try:
        assert reopened.reported_routes == {("GRPCRoute", "shop", "greeter")}
    finally:
        await reopened.close()


def test_a_parent_ref_names_a_gateway_in_the_routes_namespace_unless_it_says_another() -> None:
    obj = {
        "metadata": {"namespace": "shop"},
        "spec": {
            "parentRefs": [
                {"name": "edge"},
                {"name": "shared", "namespace": "infra"},
                {"name": "svc", "kind": "Service", "group": ""},
            ]
        },
    }

    assert parent_gateways(obj) == {("shop", "edge"), ("infra", "shared")}
