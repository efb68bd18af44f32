"""The per-object status decision: one entry per placed cluster, judged against the current version."""

from __future__ import annotations

from datetime import UTC, datetime

from meshplane.server.status import delivery_entries
from meshplane.store.records import Delivery

NOW = "2026-01-02T00:00:00+00:00"
EARLIER = "2026-01-01T00:00:00+00:00"


def report(cluster: str, version: str, state: str, message: str = "") -> Delivery:
    return Delivery(cluster, "API", "shop", "orders", version, state, message, datetime.now(UTC))


def test_every_placed_cluster_has_an_entry_in_name_order_and_unreported_ones_are_pending() -> None:
    entries = delivery_entries({"b": "v2", "a": "v2"}, {"a": report("a", "v2", "Applied")}, [], NOW)
    assert [(e["cluster"], e["state"], e["version"]) for e in entries] == [
        ("a", "Applied", "v2"),
        ("b", "Pending", "v2"),
    ]


def test_a_report_about_an_older_version_says_nothing_about_the_current_one() -> None:
    [entry] = delivery_entries({"a": "v2"}, {"a": report("a", "v1", "Applied")}, [], NOW)
    assert entry["state"] == "Pending"


def test_a_failure_carries_the_clusters_message() -> None:
    [entry] = delivery_entries({"a": "v2"}, {"a": report("a", "v2", "Failed", "regex too large")}, [], NOW)
    assert (entry["state"], entry["message"]) == ("Failed", "regex too large")


def test_the_transition_time_moves_only_when_the_state_or_version_does() -> None:
    previous = [{"cluster": "a", "state": "Applied", "version": "v2", "lastTransitionTime": EARLIER}]
    [same] = delivery_entries({"a": "v2"}, {"a": report("a", "v2", "Applied")}, previous, NOW)
    [moved] = delivery_entries({"a": "v3"}, {"a": report("a", "v2", "Applied")}, previous, NOW)
    assert same["lastTransitionTime"] == EARLIER
    assert moved["lastTransitionTime"] == NOW


def test_a_cluster_no_longer_placed_drops_out() -> None:
    previous = [{"cluster": "gone", "state": "Applied", "version": "v1", "lastTransitionTime": EARLIER}]
    assert delivery_entries({}, {}, previous, NOW) == []
