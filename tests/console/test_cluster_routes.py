"""The console shows the Gateway API routes a cluster reported, read-only: listed among the project's objects,
and a page with their origin, their spec and their parents' conditions as the cluster wrote them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2
from playwright.sync_api import expect

from meshplane.gatewayapi.state import CONTROLLER_NAME
from meshplane.proto.v1.control_plane_pb2 import LocalObject
from meshplane_testing import documents
from meshplane_testing.browser import screenshot, sign_in
from meshplane_testing.meshplane import ServerProcess, run_server

pytestmark = pytest.mark.timeout(90)

PROJECT = "storefront"


def struct(value: dict[str, Any]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(value)
    return out


def condition(kind: str, status: str, reason: str) -> dict[str, str]:
    return {"type": kind, "status": status, "reason": reason, "message": f"{kind} {reason}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server holding one HTTPRoute reported by cluster edge-1, as its agent reports it."""
    with run_server(tmp_path_factory.mktemp("console-routes")) as server:
        server.put(documents.project(PROJECT))
        server.allow_publishing("edge-1", PROJECT)
        parent = {
            "parentRef": {"name": "edge", "sectionName": "http"},
            "controllerName": CONTROLLER_NAME,
            "conditions": [
                condition("Accepted", "True", "Accepted"),
                condition("ResolvedRefs", "False", "BackendNotFound"),
            ],
        }
        route = LocalObject(
            kind="HTTPRoute",
            project=PROJECT,
            name="orders",
            labels={"team": "orders"},
            spec=struct({"parentRefs": [{"name": "edge"}], "hostnames": ["shop.example"]}),
            status=struct({"parents": [parent]}),
        )
        assert server.report_objects("edge-1", route) == [grpc.StatusCode.OK]
        yield server


def open_page(page: Any, server: ServerProcess, hash_path: str) -> None:
    """Signed in as the admin, the console once drawn, at `hash_path`."""
    sign_in(page, server.url, server.token)
    expect(page.get_by_role("link", name="Objects")).to_be_visible()
    page.evaluate(f"location.hash = {hash_path!r}")


def test_a_reported_route_is_listed_and_its_page_shows_origin_spec_and_parents_read_only(
    server: ServerProcess, page: Any
) -> None:
    open_page(page, server, f"#/objects/{PROJECT}/httproutes")

    listed = page.get_by_role("table", name=f"HTTPRoute objects in {PROJECT}")
    expect(listed.locator("tr[data-id='orders']").get_by_text("team=orders")).to_be_visible()
    expect(page.get_by_role("link", name="New HTTPRoute (YAML)")).to_have_count(0)
    listed.get_by_role("link", name="orders").click()

    expect(page.get_by_text("Made in cluster/edge-1")).to_be_visible()
    expect(page.get_by_label("Specification (YAML)")).to_contain_text("shop.example")
    parents = page.get_by_role("table", name="Parents").locator("tr[data-id='edge/http']")
    expect(parents.get_by_text("Accepted: Accepted")).to_be_visible()
    expect(parents.get_by_text("ResolvedRefs: BackendNotFound")).to_be_visible()
    expect(page.get_by_role("link", name="Edit")).to_have_count(0)
    expect(page.get_by_role("button", name="Delete")).to_have_count(0)
    screenshot(page, "cluster-route")


def test_the_grpc_routes_page_of_a_project_without_any_renders_empty(server: ServerProcess, page: Any) -> None:
    open_page(page, server, f"#/objects/{PROJECT}/grpcroutes")

    expect(page.get_by_role("table", name=f"GRPCRoute objects in {PROJECT}")).to_contain_text("No grpcroutes here.")
