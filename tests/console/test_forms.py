"""The guided forms and an application's keys page in a real browser, against a real server, agent, Envoy and
upstream: what the forms make is served by the gateway, a new key is shown once and works there, the server's
field errors are shown at their fields, and a viewer gets no form."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from playwright.sync_api import expect

from meshplane_testing import documents
from meshplane_testing.browser import screenshot, sign_in
from meshplane_testing.envoy import run_envoy
from meshplane_testing.gateway import Gateway, from_upstream, status
from meshplane_testing.meshplane import ServerProcess, run_agent, run_server
from meshplane_testing.north import put
from meshplane_testing.upstream import run_upstream

pytestmark = [pytest.mark.envoy, pytest.mark.timeout(120)]


@dataclass
class Fleet:
    server: ServerProcess
    gateway: Gateway
    upstream_port: int


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    tmp_path = tmp_path_factory.mktemp("console-forms")
    with (
        run_upstream("shop") as (port, _),
        run_server(tmp_path) as server,
        run_agent(tmp_path, "edge-1", server) as agent,
        run_envoy(tmp_path, "gw-1", agent.xds_port) as envoy,
    ):
        envoy.wait_listener(agent.gateway_port)
        gateway = Gateway(agent.gateway_port)
        yield Fleet(server, gateway, port)
        gateway.close()


def go(page: Any, server: ServerProcess, route: str, heading: str) -> None:
    """Open the console at `route` and wait for its page, whose heading is `heading`, to be drawn."""
    page.goto(f"{server.url}/ui/#{route}")
    expect(page.get_by_role("heading", name=heading, exact=True)).to_be_visible()


def open_page(page: Any, server: ServerProcess, route: str, heading: str, token: str | None = None) -> None:
    """Sign in (with the admin token unless another is given) and open the console at `route`."""
    sign_in(page, server.url, token or server.token)
    expect(page.locator("header#top")).to_be_visible()
    go(page, server, route, heading)


def fill_api(page: Any, name: str, base_path: str, port: int | str) -> None:
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("Base path").fill(base_path)
    backend = page.get_by_role("group", name="Backend 1")
    backend.get_by_label("Host").fill("127.0.0.1")
    backend.get_by_label("Port").fill(str(port))


def test_an_api_made_with_the_form_is_served_by_the_gateway(fleet: Fleet, page: Any) -> None:
    open_page(page, fleet.server, "/forms/default/apis", "New API")
    fill_api(page, "shop", "/shop", fleet.upstream_port)
    page.get_by_role("button", name="Add operation").click()
    operation = page.get_by_role("group", name="Operation 1")
    operation.get_by_label("Method").select_option("GET")
    operation.get_by_label("Path").fill("/items/{id}")
    page.get_by_label("Labels").fill("team=shop")
    screenshot(page, "api-form")
    page.get_by_role("button", name="Create API").click()
    expect(page.get_by_role("heading", name="Edit API shop")).to_be_visible()
    fleet.gateway.wait_for("/shop/items/7", from_upstream("shop"), timeout=30)
    with fleet.server.http() as rest:
        stored = rest.get("/v1/projects/default/apis/shop").json()
    assert stored["metadata"]["labels"] == {"team": "shop"}
    assert stored["spec"]["operations"] == [{"method": "GET", "path": "/items/{id}", "scopes": []}]

    go(page, fleet.server, "/forms/default/apis", "New API")
    fill_api(page, "shop", "/elsewhere", fleet.upstream_port)
    page.get_by_role("button", name="Create API").click()
    expect(page.get_by_label("Name", exact=True)).to_have_accessible_description(re.compile("already exists"))
    with fleet.server.http() as rest:
        assert rest.get("/v1/projects/default/apis/shop").json()["spec"]["basePath"] == "/shop"


def test_a_port_out_of_range_shows_at_its_field_and_stores_nothing(fleet: Fleet, page: Any) -> None:
    open_page(page, fleet.server, "/forms/default/apis", "New API")
    fill_api(page, "bad-port", "/bad-port", 70000)
    page.get_by_role("button", name="Create API").click()
    port = page.get_by_role("group", name="Backend 1").get_by_label("Port")
    expect(port).to_have_attribute("aria-invalid", "true")
    expect(port).to_have_accessible_description("Input should be less than or equal to 65535")
    expect(port.locator("xpath=..")).to_contain_text("less than or equal to 65535")
    expect(page.get_by_role("alert")).to_contain_text("Nothing was saved")
    expect(port).to_be_focused()
    screenshot(page, "api-form-error")

    page.get_by_role("group", name="Backend 1").get_by_label("Port").fill(str(fleet.upstream_port))
    page.get_by_label("Credential").select_option("jwt")
    page.get_by_label("Issuer").fill("https://login.example.com")
    page.get_by_role("button", name="Create API").click()
    authentication = page.get_by_role("group", name="Authentication")
    expect(authentication.locator(".field-error").filter(has_text="jwksUri")).to_be_visible()
    expect(port).not_to_have_attribute("aria-invalid", "true")
    page.set_viewport_size({"width": 390, "height": 800})
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    with fleet.server.http() as rest:
        assert rest.get("/v1/projects/default/apis/bad-port").status_code == 404


def test_a_key_made_on_the_page_is_shown_once_and_works_at_the_gateway(fleet: Fleet, page: Any) -> None:
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=fleet.server.url)
    open_page(page, fleet.server, "/forms/default/apis", "New API")
    fill_api(page, "keyed", "/keyed", fleet.upstream_port)
    page.get_by_label("Credential").select_option("apiKey")
    expect(page.get_by_label("Key header")).to_have_value("x-api-key")
    page.get_by_role("button", name="Create API").click()
    expect(page.get_by_role("heading", name="Edit API keyed")).to_be_visible()

    go(page, fleet.server, "/forms/default/applications", "New Application")
    page.get_by_label("Name", exact=True).fill("shop-app")
    page.get_by_label("Owner").fill("team-shop@example.com")
    page.get_by_role("button", name="Create Application").click()
    expect(page.get_by_role("heading", name="Edit Application shop-app")).to_be_visible()

    go(page, fleet.server, "/forms/default/subscriptions", "New Subscription")
    page.get_by_label("Application", exact=True).select_option("shop-app")
    page.get_by_label("API", exact=True).select_option("keyed")
    expect(page.get_by_label("Name", exact=True)).to_have_value("shop-app-keyed")
    page.get_by_label("State").select_option("active")
    page.get_by_role("button", name="Create Subscription").click()
    expect(page.get_by_role("heading", name="Edit Subscription shop-app-keyed")).to_be_visible()

    go(page, fleet.server, "/forms/default/applications/shop-app", "Edit Application shop-app")
    page.get_by_role("link", name="API keys of this application").click()
    page.get_by_role("button", name="New key").click()
    shown = page.get_by_role("textbox", name="New key")
    expect(shown).to_be_focused()
    expect(page.get_by_text("it will not be shown again")).to_be_visible()
    key = shown.input_value()
    assert key and shown.get_attribute("readonly") is not None
    page.get_by_role("button", name="Copy").click()
    expect(page.get_by_text("Copied.")).to_be_visible()
    assert page.evaluate("navigator.clipboard.readText()") == key
    screenshot(page, "application-key")
    page.set_viewport_size({"width": 390, "height": 800})
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.set_viewport_size({"width": 1280, "height": 800})

    fleet.gateway.wait_for("/keyed/items", from_upstream("shop"), headers={"x-api-key": key}, timeout=30)
    assert fleet.gateway.request("GET", "/keyed/items").status_code == 401

    page.get_by_role("link", name="Fleet").click()
    expect(page.get_by_role("heading", name="Fleet")).to_be_visible()
    page.go_back()
    expect(page.get_by_role("heading", name="API keys of shop-app")).to_be_visible()
    expect(page.get_by_role("cell", name="Active")).to_be_visible()
    expect(page.get_by_role("textbox", name="New key")).to_have_count(0)
    assert key not in page.content()
    assert key not in page.evaluate("JSON.stringify([Object.entries(sessionStorage), Object.entries(localStorage)])")

    page.get_by_role("button", name="Revoke key").click()
    expect(page.get_by_role("dialog").get_by_role("button", name="Cancel")).to_be_focused()
    page.keyboard.press("Escape")
    expect(page.get_by_role("dialog")).to_have_count(0)
    expect(page.get_by_role("cell", name="Active")).to_be_visible()
    page.get_by_role("button", name="Revoke key").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("cannot be undone")
    dialog.get_by_role("button", name="Revoke key").click()
    expect(page.get_by_role("cell", name="Revoked")).to_be_visible()
    fleet.gateway.wait_for("/keyed/items", status(401), headers={"x-api-key": key}, timeout=30)


def test_an_edit_keeps_what_the_form_does_not_show_and_never_overwrites_a_change_made_meanwhile(
    fleet: Fleet, page: Any
) -> None:
    with fleet.server.http() as rest:
        put(rest, documents.api("edited", timeout="5s", backends=[documents.backend(9001, protocol="http2")]))
    open_page(page, fleet.server, "/forms/default/apis/edited", "Edit API edited")
    port = page.get_by_role("group", name="Backend 1").get_by_label("Port")
    expect(port).to_have_value("9001")
    with fleet.server.http() as rest:
        changed = {"labels": {"changed": "meanwhile"}, "timeout": "5s"}
        put(rest, documents.api("edited", **changed, backends=[documents.backend(9001, protocol="http2")]))
    port.fill("9002")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("alert")).to_contain_text("It was changed since this page was loaded.")
    with fleet.server.http() as rest:
        assert rest.get("/v1/projects/default/apis/edited").json()["metadata"]["labels"] == {"changed": "meanwhile"}

    page.get_by_role("button", name="Reload").click()
    expect(page.get_by_label("Labels")).to_have_value("changed=meanwhile")
    page.get_by_role("group", name="Backend 1").get_by_label("Port").fill("9002")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status")).to_contain_text("Saved API edited.")
    with fleet.server.http() as rest:
        spec = rest.get("/v1/projects/default/apis/edited").json()["spec"]
    assert spec["timeout"] == "5s"
    assert [(b["port"], b["protocol"]) for b in spec["backends"]] == [(9002, "http2")]


def test_an_api_attached_to_routes_is_edited_without_traffic_of_its_own(fleet: Fleet, page: Any) -> None:
    target = {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "orders"}
    attached = documents.document("API", "attached", spec={"targetRefs": [target]})
    with fleet.server.http() as rest:
        put(rest, attached)
    open_page(page, fleet.server, "/forms/default/apis/attached", "Edit API attached")
    expect(page.get_by_role("group", name="Attached to")).to_contain_text("HTTPRoute default/orders")
    expect(page.get_by_label("Base path")).to_have_count(0)
    expect(page.get_by_role("group", name="Backend 1")).to_have_count(0)
    page.get_by_label("Credential").select_option("apiKey")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status")).to_contain_text("Saved API attached.")
    with fleet.server.http() as rest:
        spec = rest.get("/v1/projects/default/apis/attached").json()["spec"]
    assert spec["targetRefs"] == [target]
    assert spec["authentication"]["apiKey"]["header"] == "x-api-key"
    assert "basePath" not in spec and not spec.get("backends")


def test_a_rate_limit_policy_is_made_and_an_invalid_edit_stores_nothing(fleet: Fleet, page: Any) -> None:
    with fleet.server.http() as rest:
        put(rest, documents.api("limited"))
    open_page(page, fleet.server, "/forms/default/ratelimitpolicies", "New RateLimitPolicy")
    page.get_by_label("Name", exact=True).fill("limited-api")
    page.get_by_label("Target kind").select_option("SubscriptionPlan")
    expect(page.get_by_label("Plan", exact=True)).to_be_visible()
    expect(page.get_by_label("Only on API")).to_be_visible()
    page.get_by_label("Target kind").select_option("API")
    expect(page.get_by_label("Only on API")).to_be_hidden()
    page.get_by_label("API", exact=True).fill("limited")
    page.get_by_label("Requests").fill("5")
    page.get_by_label("Unit").select_option("minute")
    page.get_by_label("Counted").select_option("local")
    page.get_by_role("button", name="Create RateLimitPolicy").click()
    expect(page.get_by_role("heading", name="Edit RateLimitPolicy limited-api")).to_be_visible()

    page.get_by_label("Requests").fill("0")
    page.get_by_role("button", name="Save").click()
    requests = page.get_by_label("Requests")
    expect(requests).to_have_attribute("aria-invalid", "true")
    expect(requests).to_have_accessible_description("Input should be greater than or equal to 1")
    screenshot(page, "ratelimit-form")
    with fleet.server.http() as rest:
        spec = rest.get("/v1/projects/default/ratelimitpolicies/limited-api").json()["spec"]
    assert spec["target"] == {"kind": "API", "name": "limited"}
    assert (spec["requestsPerUnit"], spec["unit"], spec["scope"]) == (5, "minute", "local")


def test_a_subscriber_gets_the_application_form_but_not_the_api_form(fleet: Fleet, page: Any) -> None:
    token = fleet.server.bearer("subscriber", "default")["Authorization"].removeprefix("Bearer ")
    open_page(page, fleet.server, "/forms/default/apis", "New API", token)
    expect(page.get_by_text("As subscriber of default you cannot change API objects in default.")).to_be_visible()
    go(page, fleet.server, "/forms/default/applications", "New Application")
    page.get_by_label("Name", exact=True).fill("subscribed-app")
    page.get_by_role("button", name="Create Application").click()
    expect(page.get_by_role("heading", name="Edit Application subscribed-app")).to_be_visible()


def test_a_viewer_gets_no_form_and_no_key_buttons(fleet: Fleet, page: Any) -> None:
    with fleet.server.http() as rest:
        put(rest, documents.application("viewed-app"))
    token = fleet.server.bearer("viewer")["Authorization"].removeprefix("Bearer ")
    open_page(page, fleet.server, "/forms/default/apis", "New API", token)
    expect(page.get_by_text("As viewer you cannot change API objects in default.")).to_be_visible()
    expect(page.get_by_role("button", name="Create API")).to_have_count(0)
    expect(page.get_by_label("Base path")).to_have_count(0)
    go(page, fleet.server, "/keys/default/viewed-app", "API keys of viewed-app")
    expect(page.get_by_role("button", name="New key")).to_have_count(0)
    screenshot(page, "forms-viewer")
