"""The console's sign-in and fleet pages in a real browser, against a real server, agent and Envoy."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from meshplane_testing.browser import screenshot, sign_in
from meshplane_testing.envoy import run_envoy
from meshplane_testing.eventually import eventually
from meshplane_testing.meshplane import ServerProcess, run_agent, run_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp_path = tmp_path_factory.mktemp("console-fleet")
    with (
        run_server(tmp_path) as server,
        run_agent(tmp_path, "edge-1", server, labels={"region": "eu"}) as agent,
        run_envoy(tmp_path, "gw-1", agent.xds_port) as envoy,
    ):
        envoy.wait_listener(agent.gateway_port)
        server.tmp_path = tmp_path  # type: ignore[attr-defined]
        yield server


def test_a_token_signs_in_and_the_fleet_shows_the_cluster_connected(server: ServerProcess, page: Any) -> None:
    sign_in(page, server.url, server.token)
    row = page.locator("tr[data-id='edge-1']")
    expect(row.get_by_text("Connected")).to_be_visible()
    expect(row.get_by_text("region=eu")).to_be_visible()
    assert server.token not in page.url
    screenshot(page, "fleet")


def test_a_bad_token_is_refused_and_nothing_else_is_shown(server: ServerProcess, page: Any) -> None:
    sign_in(page, server.url, "mpt_nope_nothing")
    expect(page.get_by_role("alert")).to_have_text("That token was refused.")
    expect(page.locator("header#top")).to_be_hidden()
    screenshot(page, "sign-in-refused")


def test_a_cluster_that_registers_appears_without_a_reload(server: ServerProcess, page: Any) -> None:
    sign_in(page, server.url, server.token)
    expect(page.locator("tr[data-id='edge-1']")).to_be_visible()
    with run_agent(server.tmp_path, "edge-2", server, labels={"region": "us"}):  # type: ignore[attr-defined]
        expect(page.locator("tr[data-id='edge-2']").get_by_text("Connected")).to_be_visible()
        page.get_by_label("Filter clusters by name or label").fill("region=us")
        expect(page.locator("tr[data-id='edge-1']")).to_have_count(0)
        expect(page.locator("tr[data-id='edge-2']")).to_be_visible()
    expect(page.locator("tr[data-id='edge-2']").get_by_text("Disconnected")).to_be_visible()


def test_a_cluster_page_lists_what_it_receives(server: ServerProcess, page: Any, tmp_path: Path) -> None:
    with server.http() as rest:
        api = {
            "metadata": {"name": "orders"},
            "spec": {"basePath": "/orders", "backends": [{"host": "127.0.0.1", "port": 9}]},
        }
        rest.put("/v1/projects/default/apis/orders", json=api).raise_for_status()
    sign_in(page, server.url, server.token)
    page.locator("tr[data-id='edge-1'] a").click()
    expect(page.get_by_role("heading", name="Cluster edge-1")).to_be_visible()
    expect(page.get_by_role("cell", name="API default/orders")).to_be_visible()
    screenshot(page, "cluster")


def test_the_console_loads_nothing_from_elsewhere_and_keeps_to_a_narrow_screen(
    server: ServerProcess, browser: Any
) -> None:
    context = browser.new_context(viewport={"width": 390, "height": 800})
    page = context.new_page()
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    sign_in(page, server.url, server.token)
    expect(page.locator("tr[data-id='edge-1']")).to_be_visible()
    width = page.evaluate("document.documentElement.scrollWidth")
    context.close()
    assert all(url.startswith(server.url) for url in requested), requested
    assert width <= 390


def test_a_page_left_before_it_loaded_does_not_draw_over_the_next_one(server: ServerProcess, page: Any) -> None:
    sign_in(page, server.url, server.token)
    expect(page.locator("tr[data-id='edge-1']")).to_be_visible()
    page.evaluate(SLOW_CLUSTERS)
    page.evaluate("location.hash = '#/objects'")
    page.evaluate("location.hash = '#/fleet'")
    expect(page.get_by_role("heading", name="Fleet", exact=True)).to_be_visible()  # its clusters still to come
    page.evaluate("location.hash = '#/forms/default/apis'")
    name = page.get_by_label("Name", exact=True)
    expect(page.get_by_role("heading", name="New API", exact=True)).to_be_visible()
    name.fill("typing")
    expect(name).to_be_focused()
    eventually(lambda: page.evaluate("() => window.slowAnswers") > 0, what="the fleet's answer, to a page gone")
    page.wait_for_timeout(500)

    expect(page.get_by_role("heading", name="New API", exact=True)).to_be_visible()
    expect(name).to_be_focused()
    expect(name).to_have_value("typing")


SLOW_CLUSTERS = """() => {
  const answer = window.fetch;
  window.slowAnswers = 0;
  const late = (what, how) => new Promise((wait) => setTimeout(wait, 1500)).then(() => answer(what, how));
  window.fetch = (what, how) => !String(what).includes("/v1/clusters") ? answer(what, how)
    : late(what, how).then((r) => (window.slowAnswers++, r));
}"""
"""The console's reads of the fleet answered 1.5 s late."""
