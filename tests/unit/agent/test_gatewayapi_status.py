"""The status written is what `program` gave, with the spec's bookkeeping: a condition keeps its
lastTransitionTime while its status stays, and a route's entries of other controllers stay as they are."""

from __future__ import annotations

from meshplane.agent.kube.gatewayapi_status import desired_status, has_status
from meshplane.gatewayapi.state import CONTROLLER_NAME

PLACEHOLDER = "1970-01-01T00:00:00Z"


def accepted(status: str, at: str = PLACEHOLDER, reason: str = "Accepted") -> dict[str, str]:
    return {"type": "Accepted", "status": status, "reason": reason, "lastTransitionTime": at}


def parent(controller: str, gateway: str, *conditions: dict[str, str]) -> dict:
    return {"parentRef": {"name": gateway}, "controllerName": controller, "conditions": list(conditions)}


def test_a_condition_whose_status_stays_keeps_its_transition_time() -> None:
    current = {"conditions": [accepted("True", "2026-01-01T00:00:00Z", reason="Old")]}
    out = desired_status("GatewayClass", current, {"conditions": [accepted("True")]}, now="2026-12-01T00:00:00Z")
    assert out["conditions"] == [accepted("True", "2026-01-01T00:00:00Z")]


def test_a_condition_whose_status_changes_takes_the_time_of_the_change() -> None:
    current = {"conditions": [accepted("True", "2026-01-01T00:00:00Z")]}
    out = desired_status("Gateway", current, {"conditions": [accepted("False")]}, now="2026-12-01T00:00:00Z")
    assert out["conditions"] == [accepted("False", "2026-12-01T00:00:00Z")]


def test_a_listener_keeps_the_times_of_its_conditions() -> None:
    current = {"listeners": [{"name": "http", "conditions": [accepted("True", "2026-01-01T00:00:00Z")]}]}
    ours = {"listeners": [{"name": "http", "attachedRoutes": 1, "conditions": [accepted("True")]}]}
    out = desired_status("Gateway", current, ours, now="2026-12-01T00:00:00Z")
    assert out["listeners"][0]["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"


def test_other_controllers_entries_of_a_route_stay_in_place() -> None:
    theirs = parent("example.com/other", "theirs", accepted("True", "2025-01-01T00:00:00Z"))
    stale = parent(CONTROLLER_NAME, "gone", accepted("True", "2026-01-01T00:00:00Z"))
    current = {"parents": [theirs, stale]}
    ours = {"parents": [parent(CONTROLLER_NAME, "edge", accepted("True")), parent("example.com/other", "x")]}
    out = desired_status("HTTPRoute", current, ours, now="2026-12-01T00:00:00Z")
    assert out["parents"] == [theirs, parent(CONTROLLER_NAME, "edge", accepted("True", "2026-12-01T00:00:00Z"))]


def test_a_status_already_there_is_not_written_again() -> None:
    current = {"conditions": [accepted("True", "2026-01-01T00:00:00Z")], "supportedFeatures": []}
    out = desired_status("GatewayClass", current, {"conditions": [accepted("True")]})
    assert has_status(current, out)
    assert not has_status(current, desired_status("GatewayClass", current, {"conditions": [accepted("False")]}))
