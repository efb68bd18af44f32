"""The decision table: which request is allowed, and why every other one is refused."""

from __future__ import annotations

import pytest

from meshplane.enforcer.decision import Allow, Denial, decide
from meshplane.enforcer.snapshot import Snapshot
from meshplane_testing.enforcer_factories import NOW, api, application, check_request, key, loaded, subscription

FLEET = (
    api("shop/orders", header="x-api-key", query="api_key"),
    api("shop/billing", header="X-Billing-Key", query=""),
    application(
        "shop/mobile",
        key("mobile-key", "k1"),
        key("old-key", "k2", expires=NOW - 1),
        key("due-key", "k3", expires=NOW),
        key("fresh-key", "k4", expires=NOW + 60),
        key("s3cret/+=", "k5"),
    ),
    application("shop/web", key("web-key", "w1")),
    application("shop/banned", key("banned-key", "b1")),
    application("other/rogue", key("rogue-key", "r1")),
    subscription("shop/mobile-orders", "mobile", "orders", plan="gold"),
    subscription("shop/web-billing", "web", "billing", plan="free"),
    subscription("shop/banned-orders", "banned", "orders", active=False),
    # rogue subscribes to an API named orders in its own project: its key must still not open shop/orders.
    subscription("other/rogue-orders", "rogue", "orders"),
)


@pytest.fixture
async def snapshot() -> Snapshot:
    return (await loaded(*FLEET)).snapshot


@pytest.mark.parametrize(
    ("request_api", "headers", "path", "denial"),
    [
        pytest.param(None, {"x-api-key": "mobile-key"}, "/orders/items", Denial.UNKNOWN_API, id="route-names-no-api"),
        pytest.param("shop/nope", {"x-api-key": "mobile-key"}, "/", Denial.UNKNOWN_API, id="unknown-api"),
        pytest.param("orders", {"x-api-key": "mobile-key"}, "/", Denial.UNKNOWN_API, id="api-without-project"),
        pytest.param("shop/orders", {}, "/orders/items", Denial.MISSING_KEY, id="no-key"),
        pytest.param("shop/orders", {"x-api-key": ""}, "/orders/items", Denial.MISSING_KEY, id="empty-header"),
        pytest.param("shop/orders", {}, "/orders/items?api_key=", Denial.MISSING_KEY, id="empty-query-parameter"),
        pytest.param("shop/orders", {"authorization": "mobile-key"}, "/", Denial.MISSING_KEY, id="other-header"),
        pytest.param("shop/billing", {}, "/b?api_key=web-key", Denial.MISSING_KEY, id="query-not-read-for-this-api"),
        pytest.param("shop/orders", {"x-api-key": "guess"}, "/orders/items", Denial.INVALID_KEY, id="unknown-key"),
        pytest.param("shop/orders", {}, "/orders?api_key=guess", Denial.INVALID_KEY, id="unknown-query-key"),
        pytest.param("shop/orders", {"x-api-key": "MOBILE-KEY"}, "/", Denial.INVALID_KEY, id="keys-are-exact"),
        pytest.param("shop/orders", {"x-api-key": "rogue-key"}, "/", Denial.INVALID_KEY, id="key-of-another-project"),
        pytest.param("shop/orders", {"x-api-key": "old-key"}, "/", Denial.EXPIRED_KEY, id="expired"),
        pytest.param("shop/orders", {"x-api-key": "due-key"}, "/", Denial.EXPIRED_KEY, id="expires-now"),
        pytest.param("shop/orders", {"x-api-key": "web-key"}, "/", Denial.NOT_SUBSCRIBED, id="subscribed-elsewhere"),
        pytest.param("shop/orders", {"x-api-key": "banned-key"}, "/", Denial.SUBSCRIPTION_BLOCKED, id="blocked"),
    ],
)
def test_refused_requests_say_why(
    snapshot: Snapshot, request_api: str | None, headers: dict[str, str], path: str, denial: Denial
) -> None:
    assert decide(snapshot, check_request(request_api, headers, path), NOW) is denial


@pytest.mark.parametrize(
    ("request_api", "headers", "path", "key_id", "plan"),
    [
        pytest.param("shop/orders", {"x-api-key": "mobile-key"}, "/orders/items", "k1", "gold", id="header"),
        pytest.param("shop/orders", {}, "/orders/items?a=1&api_key=mobile-key", "k1", "gold", id="query"),
        pytest.param("shop/orders", {}, "/orders?api_key=s3cret%2F%2B%3D", "k5", "gold", id="url-decoded-query"),
        pytest.param("shop/orders", {"x-api-key": "fresh-key"}, "/", "k4", "gold", id="not-yet-expired"),
        pytest.param("shop/orders", {"x-api-key": "mobile-key"}, "/?api_key=guess", "k1", "gold", id="header-first"),
        pytest.param("shop/orders", {"x-api-key": ""}, "/?api_key=mobile-key", "k1", "gold", id="empty-header-query"),
        pytest.param("shop/billing", {"x-billing-key": "web-key"}, "/", "w1", "free", id="header-name-any-case"),
    ],
)
def test_live_key_of_a_subscribed_application_is_allowed(
    snapshot: Snapshot, request_api: str, headers: dict[str, str], path: str, key_id: str, plan: str
) -> None:
    decision = decide(snapshot, check_request(request_api, headers, path), NOW)

    assert isinstance(decision, Allow)
    assert (decision.key.key_id, decision.plan) == (key_id, plan)
    assert f"{decision.api.project}/{decision.api.name}" == request_api


def test_allow_names_the_application_and_its_project(snapshot: Snapshot) -> None:
    decision = decide(snapshot, check_request(headers={"x-api-key": "mobile-key"}), NOW)

    assert isinstance(decision, Allow)
    assert (decision.key.project, decision.key.application) == ("shop", "mobile")


async def test_a_blocked_subscription_wins_over_an_active_twin() -> None:
    state = await loaded(
        *FLEET,
        subscription("shop/a-mobile-orders", "mobile", "orders", plan="silver", active=True),
        subscription("shop/z-mobile-orders", "mobile", "orders", active=False),
    )

    request = check_request(headers={"x-api-key": "mobile-key"})
    assert decide(state.snapshot, request, NOW) is Denial.SUBSCRIPTION_BLOCKED


def test_nothing_is_allowed_before_the_first_configuration() -> None:
    request = check_request(headers={"x-api-key": "mobile-key"})
    assert decide(Snapshot(), request, NOW) is Denial.UNKNOWN_API
