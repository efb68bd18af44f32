"""The console's rollout pages in a real browser, against a real server whose clusters `a` and `b` are registered
over REST and never connect: under offline Skip every wave skips its clusters and bakes, so a rollout advances on
its own; under offline Wait the canary (`a`) stays Pending, so a rollout waits there until someone acts on it.
Each test writes its API in a project of its own."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from meshplane_testing import documents
from meshplane_testing.browser import screenshot, sign_in
from meshplane_testing.eventually import eventually
from meshplane_testing.meshplane import ServerProcess, run_server

pytestmark = pytest.mark.timeout(60)

_projects = itertools.count(1)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with run_server(tmp_path_factory.mktemp("console-rollouts")) as server:
        for cluster in ("a", "b"):
            server.put(documents.cluster(cluster))
        yield server


def governed_project(server: ServerProcess, offline: str, canary_bake: str, rest_bake: str) -> str:
    """A new project whose API changes roll out in waves canary (cluster a) then rest."""
    project = f"shop{next(_projects)}"
    server.put(documents.project(project))
    waves = [{"name": "canary", "clusters": ["a"], "bake": canary_bake}, {"name": "rest", "bake": rest_bake}]
    spec = {"waves": waves, "offline": offline, "selector": {"kinds": ["API"]}}
    server.put(documents.rollout_policy("careful", project=project, **spec))
    return project


def orders(project: str, version: str = "v1") -> dict[str, Any]:
    """API `orders` of `project`, under a base path of its own (projects share hostnames)."""
    return documents.api("orders", project=project, basePath=f"/{project}/{version}/orders")


def rollout_of(server: ServerProcess, project: str) -> dict[str, Any]:
    with server.http() as http:
        return http.get(f"/v1/projects/{project}/rollouts/api-orders").raise_for_status().json()


def revision_of(server: ServerProcess, project: str) -> int:
    with server.http() as http:
        api = http.get(f"/v1/projects/{project}/apis/orders").raise_for_status().json()
    return int(api["metadata"]["resourceVersion"])


def phase_of(server: ServerProcess, project: str) -> str:
    return str(rollout_of(server, project)["spec"]["phase"])


def waiting_at_the_canary(server: ServerProcess) -> str:
    """A project whose API `orders` was just made and waits at the canary for good."""
    project = governed_project(server, "Wait", "1s", "1s")
    server.put(orders(project))
    return project


def open_rollout(page: Any, server: ServerProcess, project: str, token: str | None = None) -> None:
    sign_in(page, server.url, token or server.token)
    expect(page.get_by_role("heading", name="Fleet")).to_be_visible()
    page.goto(f"{server.url}/ui/#/rollouts/{project}/api-orders")
    expect(page.get_by_role("heading", name="Rollout api-orders")).to_be_visible()


def token_of(server: ServerProcess, role: str, project: str | None = None) -> str:
    return server.bearer(role, project)["Authorization"].removeprefix("Bearer ")


def test_a_rollout_advances_live_and_pauses_and_resumes_from_the_page(server: ServerProcess, page: Any) -> None:
    project = governed_project(server, "Skip", "1s", "1h")
    server.put(orders(project))
    open_rollout(page, server, project)
    canary, rest = page.get_by_role("region", name="Wave canary"), page.get_by_role("region", name="Wave rest")

    expect(canary.locator("tr[data-id='a']").get_by_text("Skipped")).to_be_visible()
    expect(canary.get_by_role("heading")).to_contain_text("Succeeded")
    expect(rest.get_by_role("heading")).to_contain_text("Baking")
    expect(rest.get_by_role("progressbar", name="Bake of wave rest")).to_be_visible()
    page.get_by_role("button", name="Pause").click()

    expect(page.locator("#rollout-phase")).to_have_text("Paused")
    assert phase_of(server, project) == "Paused"
    expect(page.get_by_role("button", name="Pause")).to_have_count(0)
    screenshot(page, "rollout-paused")
    page.get_by_role("button", name="Resume").click()
    expect(page.locator("#rollout-phase")).to_have_text("Progressing")
    assert phase_of(server, project) == "Progressing"


def test_the_list_shows_active_rollouts_first_and_leads_to_each(server: ServerProcess, page: Any) -> None:
    done = governed_project(server, "Skip", "0s", "0s")
    server.put(orders(done))
    eventually(lambda: phase_of(server, done) == "Succeeded", what="the rollout to succeed")
    active = waiting_at_the_canary(server)
    sign_in(page, server.url, server.token)
    page.get_by_role("link", name="Rollouts").click()

    rows = page.locator("table.data tbody tr")
    expect(page.locator(f"tr[data-id='{active}/api-orders']").get_by_text("Progressing")).to_be_visible()
    expect(page.locator(f"tr[data-id='{done}/api-orders']").get_by_text("Succeeded", exact=True)).to_be_visible()
    ids = rows.evaluate_all("rows => rows.map(row => row.dataset.id)")
    assert ids.index(f"{active}/api-orders") < ids.index(f"{done}/api-orders")
    screenshot(page, "rollouts")
    page.get_by_role("link", name=f"{active}/api-orders").click()
    expect(page.get_by_role("region", name="Wave canary").locator("tr[data-id='a']")).to_contain_text("Pending")


def test_promote_asks_first_then_gives_every_cluster_the_change(server: ServerProcess, page: Any) -> None:
    project = waiting_at_the_canary(server)
    open_rollout(page, server, project)

    page.get_by_role("button", name="Promote").click()
    page.get_by_role("dialog").get_by_role("button", name="Cancel").click()
    page.get_by_role("button", name="Promote").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("dialog").get_by_role("button", name="Cancel")).to_be_focused()
    page.keyboard.press("Escape")
    expect(page.get_by_role("dialog")).to_have_count(0)
    assert phase_of(server, project) == "Progressing"
    page.get_by_role("button", name="Promote").click()
    page.get_by_role("dialog").get_by_role("button", name="Promote").click()

    expect(page.locator("#rollout-phase")).to_have_text("Succeeded")
    assert rollout_of(server, project)["spec"]["released"] == ["a", "b"]
    screenshot(page, "rollout-promoted")


def test_abort_asks_first_and_a_refused_action_shows_the_servers_reason(server: ServerProcess, page: Any) -> None:
    project = waiting_at_the_canary(server)
    page.route("**/v1/watch**", lambda route: route.abort())  # the page does not learn of the pause below
    open_rollout(page, server, project)
    with server.http() as http:
        http.post(f"/v1/projects/{project}/rollouts/api-orders/pause").raise_for_status()

    page.get_by_role("button", name="Pause").click()
    expect(page.get_by_role("alert")).to_have_text(
        "Refused: rollout is Paused: only a progressing rollout can be paused"
    )
    expect(page.locator("#rollout-phase")).to_have_text("Paused")
    page.get_by_role("button", name="Abort").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text(f"API {project}/orders is deleted again")
    dialog.get_by_role("button", name="Abort").click()

    expect(page.locator("#rollout-phase")).to_have_text("Aborted")
    screenshot(page, "rollout-aborted")
    with server.http() as http:
        assert http.get(f"/v1/projects/{project}/apis/orders").status_code == 404


def test_roll_back_writes_the_earlier_revision_again_as_a_new_change(server: ServerProcess, page: Any) -> None:
    project = governed_project(server, "Skip", "0s", "0s")
    first = server.put(orders(project))
    eventually(lambda: phase_of(server, project) == "Succeeded", what="the first rollout to succeed")
    # The server writes the first version's delivery status, under revisions of its own, before the change.
    eventually(lambda: revision_of(server, project) > int(first["metadata"]["resourceVersion"]), what="its status")
    server.put(orders(project, "v2"))
    eventually(lambda: phase_of(server, project) == "Succeeded", what="the second rollout to succeed")
    open_rollout(page, server, project)

    page.get_by_role("button", name="Roll back").click()
    page.get_by_role("dialog").get_by_role("button", name="Roll back").click()

    # The write goes through the rollout policy like any other: on a loaded machine it takes seconds.
    expect(page.get_by_role("status")).to_contain_text("Roll back: done", timeout=15_000)
    with server.http() as http:
        history = http.get(f"/v1/projects/{project}/apis/orders/history").raise_for_status().json()
    eventually(lambda: revision_of(server, project) > history["items"][0]["revision"], what="the rollback's status")
    with server.http() as http:
        now = http.get(f"/v1/projects/{project}/apis/orders").raise_for_status().json()
    assert now["spec"]["basePath"] == first["spec"]["basePath"] == f"/{project}/v1/orders"
    # The rollback's own revision: the object's may be newer already, by the status written after it.
    expect(page.locator("dl.facts")).to_contain_text(f"→ {history['items'][0]['revision']}")
    screenshot(page, "rollout-rolled-back")


def action_buttons(page: Any) -> Any:
    """The page's buttons that act (a table heading's sort button only orders what is shown)."""
    return page.locator("main button:not(.sort)")


def test_a_viewer_sees_rollouts_and_the_fleet_but_no_button_that_acts(server: ServerProcess, page: Any) -> None:
    project = waiting_at_the_canary(server)
    open_rollout(page, server, project, token_of(server, "viewer"))

    expect(page.get_by_role("region", name="Wave canary").locator("tr[data-id='a']")).to_contain_text("Pending")
    expect(page.get_by_role("group", name="Rollout actions").get_by_role("button")).to_have_count(0)
    expect(action_buttons(page)).to_have_count(0)
    screenshot(page, "rollout-viewer")
    page.get_by_role("link", name="Rollouts").click()
    expect(page.locator(f"tr[data-id='{project}/api-orders']")).to_be_visible()
    expect(action_buttons(page)).to_have_count(0)
    page.get_by_role("link", name="Fleet").click()
    expect(page.locator("tr[data-id='a']")).to_be_visible()
    expect(action_buttons(page)).to_have_count(0)


def test_a_publisher_may_act_on_a_rollout_of_an_api_where_a_subscriber_may_not(
    server: ServerProcess, browser: Any
) -> None:
    project = waiting_at_the_canary(server)
    for role, buttons in (("publisher", ["Pause", "Promote", "Abort"]), ("subscriber", [])):
        context = browser.new_context()
        opened = context.new_page()
        open_rollout(opened, server, project, token_of(server, role, project))
        expect(opened.get_by_role("region", name="Wave canary")).to_be_visible()
        expect(action_buttons(opened)).to_have_text(buttons)
        context.close()


def test_a_project_bound_token_sees_no_other_projects_rollouts(server: ServerProcess, page: Any) -> None:
    mine, theirs = waiting_at_the_canary(server), waiting_at_the_canary(server)
    sign_in(page, server.url, token_of(server, "publisher", mine))
    page.get_by_role("link", name="Rollouts").click()

    expect(page.locator(f"tr[data-id='{mine}/api-orders']")).to_be_visible()
    expect(page.locator("table.data tbody tr")).to_have_count(1)
    page.goto(f"{server.url}/ui/#/rollouts/{theirs}/api-orders")
    expect(page.get_by_role("heading", name="Not found")).to_be_visible()
    expect(page.get_by_role("region", name="Wave canary")).to_have_count(0)
    screenshot(page, "rollout-other-project")


def test_a_rollouts_page_keeps_to_a_phones_width(server: ServerProcess, browser: Any) -> None:
    project = waiting_at_the_canary(server)
    context = browser.new_context(viewport={"width": 390, "height": 800})
    page = context.new_page()
    open_rollout(page, server, project)
    expect(page.get_by_role("button", name="Pause")).to_be_visible()

    width = page.evaluate("document.documentElement.scrollWidth")
    screenshot(page, "rollout-narrow")
    context.close()
    assert width <= 390
