"""The console's object pages in a real browser, against a real server, agent and Envoy: objects listed and
delivered live, the delivery matrix with an Envoy rejection, YAML edits refused at their fields, history diffs,
and a delete that names what depends on the object."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from playwright.sync_api import expect

from meshplane.agent.bootstrap import envoy_bootstrap
from meshplane.model.registry import REGISTRY
from meshplane_testing import documents
from meshplane_testing.browser import screenshot, sign_in
from meshplane_testing.cli import meshplane
from meshplane_testing.envoy import run_envoy, run_envoy_config
from meshplane_testing.meshplane import ServerProcess, run_agent, run_server
from meshplane_testing.process import free_port

pytestmark = pytest.mark.timeout(90)

APIS = "/v1/projects/default/apis"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server and two clusters: edge-1's gateway is one whose operator allows only tiny regexes, so that Envoy
    itself rejects an API with templated paths (as an operator's limits may); edge-2's takes what it is sent."""
    tmp_path = tmp_path_factory.mktemp("console-objects")
    with (
        run_server(tmp_path) as server,
        run_agent(tmp_path, "edge-1", server) as strict_agent,
        run_agent(tmp_path, "edge-2", server) as agent,
    ):
        bootstrap = envoy_bootstrap("gw-strict", "127.0.0.1", strict_agent.xds_port, admin_port=free_port())
        bootstrap["layered_runtime"] = {
            "layers": [{"name": "strict", "static_layer": {"re2.max_program_size.error_level": 15}}]
        }
        with (
            run_envoy_config(tmp_path, "gw-strict", bootstrap) as strict,
            run_envoy(tmp_path, "gw-2", agent.xds_port) as envoy,
        ):
            strict.wait_listener(strict_agent.gateway_port)
            envoy.wait_listener(agent.gateway_port)
            yield server


@pytest.fixture
def rest(server: ServerProcess) -> Iterator[httpx.Client]:
    with server.http() as client:
        yield client


def put_api(rest: httpx.Client, name: str, **spec: Any) -> dict[str, Any]:
    return rest.put(f"{APIS}/{name}", json=documents.api(name, **spec)).raise_for_status().json()


def open_page(page: Any, server: ServerProcess, hash_path: str, token: str | None = None) -> None:
    sign_in(page, server.url, token or server.token)
    expect(page.get_by_role("link", name="Objects")).to_be_visible()
    page.evaluate(f"location.hash = {hash_path!r}")


def test_the_kinds_offered_are_those_rest_serves(rest: httpx.Client) -> None:
    kinds = {k["plural"]: k for k in rest.get("/ui/kinds.json").raise_for_status().json()}

    assert set(kinds) == {info.plural for info in REGISTRY if info.exposed}
    assert kinds["apis"] == {"kind": "API", "plural": "apis", "namespaced": True, "writable": True}
    assert kinds["rollouts"]["writable"] is False
    assert kinds["clusters"]["namespaced"] is False


def test_an_api_applied_by_the_cli_appears_and_its_delivery_turns_applied_live(
    server: ServerProcess, page: Any, tmp_path: Path
) -> None:
    open_page(page, server, "#/objects")
    page.get_by_label("Project").select_option("default")
    page.get_by_label("Kind").select_option("apis")
    expect(page.get_by_role("table", name="API objects in default")).to_be_visible()
    page.evaluate("window.notReloaded = true")
    manifest = tmp_path / "orders.yaml"
    manifest.write_text(yaml.safe_dump(documents.api("cli-orders", labels={"team": "sales"})))

    applied = meshplane("apply", "-f", str(manifest), server=server)

    assert applied.returncode == 0, applied.stderr
    row = page.locator("tr[data-id='cli-orders']")
    expect(row.get_by_text("Applied 2/2")).to_be_visible(timeout=20_000)
    expect(row.get_by_text("team=sales")).to_be_visible()
    assert page.evaluate("window.notReloaded") is True
    page.get_by_label("Filter by label selector").fill("team=ops")
    page.get_by_label("Filter by label selector").press("Enter")
    expect(row).to_have_count(0)
    screenshot(page, "objects")


def test_the_object_page_shows_its_spec_delivery_matrix_and_audit(
    server: ServerProcess, rest: httpx.Client, page: Any
) -> None:
    put_api(rest, "shown", basePath="/shown")
    open_page(page, server, "#/objects/default/apis/shown")

    matrix = page.get_by_role("table", name="Delivery")
    for cluster in ("edge-1", "edge-2"):
        expect(matrix.locator(f"tr[data-id='{cluster}']").get_by_text("Applied")).to_be_visible(timeout=20_000)
    expect(page.get_by_label("Specification (YAML)")).to_contain_text("basePath: /shown")
    expect(page.get_by_label("Specification (YAML)")).not_to_contain_text("status:")
    audit = page.get_by_role("table", name="Audit")
    expect(audit.get_by_role("cell", name="token/bootstrap-admin")).to_be_visible()
    expect(page.get_by_role("link", name="Edit")).to_be_visible()
    screenshot(page, "object-delivery")


def test_a_viewer_sees_the_object_with_no_action_buttons(server: ServerProcess, rest: httpx.Client, page: Any) -> None:
    put_api(rest, "watched", basePath="/watched")
    viewer = server.bearer("viewer", "default")["Authorization"].removeprefix("Bearer ")
    open_page(page, server, "#/objects/default/apis/watched", viewer)

    expect(page.get_by_role("table", name="Delivery").locator("tr[data-id='edge-1']")).to_be_visible()
    expect(page.get_by_role("link", name="Edit")).to_have_count(0)
    expect(page.get_by_role("button", name="Delete")).to_have_count(0)
    page.evaluate("location.hash = '#/objects/default/apis'")
    expect(page.get_by_role("table", name="API objects in default")).to_be_visible()
    expect(page.get_by_role("link", name=re.compile("^New"))).to_have_count(0)
    screenshot(page, "objects-viewer")


def test_a_project_bound_token_picks_among_its_own_projects_only(
    server: ServerProcess, rest: httpx.Client, page: Any
) -> None:
    rest.post("/v1/projects", json=documents.project("bound")).raise_for_status()
    token = server.bearer("publisher", "bound")["Authorization"].removeprefix("Bearer ")
    open_page(page, server, "#/objects", token)

    projects = page.get_by_label("Project")
    expect(projects).to_have_value("bound")
    expect(projects.locator("option")).to_have_text(["bound"])
    page.get_by_label("Kind").select_option("apis")
    expect(page.get_by_role("link", name="New API (YAML)")).to_be_visible()
    page.evaluate("location.hash = '#/objects/default/apis'")
    expect(page.get_by_role("alert")).to_contain_text("not found")
    screenshot(page, "objects-project-bound")


def test_an_invalid_edit_shows_the_fields_error_and_stores_nothing(
    server: ServerProcess, rest: httpx.Client, page: Any
) -> None:
    put_api(rest, "edited", basePath="/edited")
    open_page(page, server, "#/objects/default/apis/edited")
    page.get_by_role("link", name="Edit").click()
    editor = page.get_by_label("API (YAML)")
    expect(editor).to_have_value(re.compile("basePath: /edited"))

    original = editor.input_value()
    editor.fill(original.replace("basePath: /edited", "basePath: [/edited"))
    page.get_by_role("button", name="Review changes").click()
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#editor-errors").get_by_role("alert")).to_contain_text("not valid YAML at line")

    editor.fill(original.replace("basePath: /edited", "basePath: edited"))
    page.get_by_role("button", name="Review changes").click()
    review = page.get_by_label("Changes before saving")
    expect(review.locator("span.del")).to_have_text(re.compile(r"^-\s+basePath: /edited\s*$"))
    expect(review.locator("span.add")).to_have_text(re.compile(r"^\+\s+basePath: edited\s*$"))
    page.get_by_role("button", name="Save").click()

    error = page.locator("#editor-errors").get_by_role("alert")
    expect(error.locator("li[data-path='spec.basePath']")).to_be_visible()
    assert rest.get(f"{APIS}/edited").json()["spec"]["basePath"] == "/edited"
    screenshot(page, "object-edit-error")

    editor.fill(editor.input_value().replace("basePath: edited", "basePath: /edited-v2"))
    page.get_by_role("button", name="Review changes").click()
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_label("Specification (YAML)")).to_contain_text("basePath: /edited-v2")
    assert rest.get(f"{APIS}/edited").json()["spec"]["basePath"] == "/edited-v2"


def test_a_new_object_written_as_yaml_is_created_after_its_review(
    server: ServerProcess, rest: httpx.Client, page: Any
) -> None:
    open_page(page, server, "#/objects/default/apis")
    expect(page.get_by_role("link", name="New API with a form")).to_have_attribute("href", "#/forms/default/apis")
    page.get_by_role("link", name="New API (YAML)").click()
    written = yaml.safe_dump(documents.api("from-yaml", basePath="/from-yaml"), sort_keys=False)

    page.get_by_label("API (YAML)").fill(written)
    page.get_by_role("button", name="Review changes").click()
    expect(
        page.get_by_label("Changes before saving").locator("span.add", has_text="basePath: /from-yaml")
    ).to_be_visible()
    page.get_by_role("button", name="Save").click()

    expect(page.get_by_role("heading", name="API from-yaml")).to_be_visible()
    expect(page.get_by_role("table", name="Delivery").locator("tr[data-id='edge-1']")).to_be_visible()
    assert rest.get(f"{APIS}/from-yaml").json()["spec"]["basePath"] == "/from-yaml"
    screenshot(page, "object-new-yaml")


def test_an_object_page_keeps_to_a_phones_width(server: ServerProcess, rest: httpx.Client, browser: Any) -> None:
    put_api(rest, "narrow", basePath="/narrow")
    context = browser.new_context(viewport={"width": 390, "height": 800})
    page = context.new_page()
    try:
        open_page(page, server, "#/objects/default/apis/narrow")
        expect(page.get_by_role("table", name="Delivery").locator("tr[data-id='edge-1']")).to_be_visible()
        expect(page.get_by_label("Specification (YAML)")).to_contain_text("basePath: /narrow")
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        screenshot(page, "object-narrow")
    finally:
        context.close()


def test_history_shows_the_diff_of_two_revisions(server: ServerProcess, rest: httpx.Client, page: Any) -> None:
    first = put_api(rest, "history", basePath="/history-1")
    put_api(rest, "history", basePath="/history-2")
    put_api(rest, "history", basePath="/history-3")
    open_page(page, server, "#/objects/default/apis/history")
    expect(page.get_by_role("table", name="History").locator("tbody tr")).to_have_count(3)

    page.get_by_label("From revision", exact=True).select_option(first["metadata"]["resourceVersion"])
    page.get_by_role("button", name="Show the diff").click()

    diff = page.locator("pre.diff")
    expect(diff.locator("span.del", has_text="basePath: /history-1")).to_be_visible()
    expect(diff.locator("span.add", has_text="basePath: /history-3")).to_be_visible()
    expect(diff.locator("span.add", has_text="history-2")).to_have_count(0)
    screenshot(page, "object-history")


def test_a_nacked_object_shows_failed_with_envoys_message(server: ServerProcess, rest: httpx.Client, page: Any) -> None:
    put_api(rest, "strict", basePath="/strict")
    open_page(page, server, "#/objects/default/apis/strict")
    row = page.get_by_role("table", name="Delivery").locator("tr[data-id='edge-1']")
    expect(row.get_by_text("Applied")).to_be_visible(timeout=20_000)

    templated = [{"method": "GET", "path": "/items"}, {"method": "GET", "path": "/items/{id}/parts/{part}/x/{y}"}]
    put_api(rest, "strict", basePath="/strict", operations=templated)

    try:
        expect(row.get_by_text("Failed")).to_be_visible(timeout=20_000)
        expect(row).to_contain_text("RE2 program size")
        other = page.get_by_role("table", name="Delivery").locator("tr[data-id='edge-2']")
        expect(other.get_by_text("Applied")).to_be_visible(timeout=20_000)
        page.get_by_role("link", name="API objects in default").click()
        expect(page.locator("tr[data-id='strict']").get_by_text("1 Failed")).to_be_visible()
        page.go_back()
        expect(row.get_by_text("Failed")).to_be_visible()
        screenshot(page, "object-nack")
    finally:
        rest.delete(f"{APIS}/strict").raise_for_status()


def test_a_delete_names_a_dependent_subscription_and_a_refused_delete_says_why(
    server: ServerProcess, rest: httpx.Client, page: Any
) -> None:
    put_api(rest, "held", basePath="/held")
    rest.put("/v1/projects/default/applications/buyer", json=documents.application("buyer")).raise_for_status()
    subscription = documents.subscription("buyer-held", application="buyer", api="held")
    rest.put("/v1/projects/default/subscriptions/buyer-held", json=subscription).raise_for_status()
    try:
        open_page(page, server, "#/objects/default/apis/held")

        page.get_by_role("button", name="Delete").click()
        dialog = page.get_by_role("dialog", name="Delete API held?")
        expect(dialog.get_by_role("listitem")).to_contain_text("Subscription buyer-held (spec.api) names it")
        dialog.get_by_role("button", name="Delete").click()
        expect(dialog.get_by_role("alert")).to_contain_text("still named by subscriptions buyer-held")
        assert rest.get(f"{APIS}/held").status_code == 200
        screenshot(page, "object-delete-refused")

        rest.delete("/v1/projects/default/subscriptions/buyer-held").raise_for_status()
        dialog.get_by_role("button", name="Delete").click()
        expect(page.get_by_role("table", name="API objects in default")).to_be_visible()
        assert rest.get(f"{APIS}/held").status_code == 404
    finally:
        # Last in the module: the strict gateway refuses the access checks an application brings, and from then
        # on every route update of the cluster fails there.
        rest.delete("/v1/projects/default/subscriptions/buyer-held")
        rest.delete("/v1/projects/default/applications/buyer")
