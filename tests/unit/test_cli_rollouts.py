"""The rollout views and `apply --wait`'s decisions, on Rollout objects as the north API returns them."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rich.console import Console

from meshplane.cli_ops import EXIT_FAILED, EXIT_OK, EXIT_TIMEOUT
from meshplane.cli_rollouts import (
    EXIT_PAUSED,
    Followed,
    RolloutLines,
    bake_progress,
    combined,
    current_wave,
    outcome,
    revisions,
)

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def rollout(phase: str = "Progressing", to_revision: int = 7, **spec: Any) -> dict[str, Any]:
    waves = [
        {"name": "canary", "state": "Baking", "clusters": [{"name": "a", "state": "Applied"}]},
        {"name": "rest", "state": "Waiting", "clusters": [{"name": "b", "state": "Waiting"}]},
    ]
    return {
        "metadata": {"name": "api-orders", "project": "shop", "resourceVersion": str(to_revision - 1)},
        "spec": {
            "target": {"kind": "API", "name": "orders"},
            "strategy": {"waves": [{"name": "canary", "bake": "30s"}, {"name": "rest", "bake": "0s"}]},
            "toRevision": to_revision,
            "waves": waves,
            "currentWave": 0,
            "phase": phase,
            "reason": "",
            **spec,
        },
    }


FOLLOWED = Followed("apis/orders -p shop", "shop", "api-orders", 7)


@pytest.mark.parametrize(
    ("phase", "reason", "code"),
    [
        ("Succeeded", "every wave succeeded", EXIT_OK),
        ("RolledBack", "wave canary failed: a: NACK", EXIT_FAILED),
        ("Aborted", "aborted by request", EXIT_FAILED),
        ("Superseded", "superseded by the write at revision 9", EXIT_FAILED),
        ("Paused", "paused by request", EXIT_PAUSED),
    ],
)
def test_a_followed_rollout_ends_with_its_phase_and_reason(phase: str, reason: str, code: int) -> None:
    ended = outcome(FOLLOWED, rollout(phase, reason=reason), through_pauses=False)

    assert ended is not None and ended.code == code
    assert ended.text.startswith(reason)


def test_a_progressing_rollout_goes_on_and_a_paused_one_too_when_told_to_wait_through_pauses() -> None:
    assert outcome(FOLLOWED, rollout("Progressing"), through_pauses=False) is None
    assert outcome(FOLLOWED, rollout("Paused"), through_pauses=True) is None


def test_a_rollout_of_a_newer_write_means_the_followed_write_was_superseded() -> None:
    ended = outcome(FOLLOWED, rollout("Progressing", to_revision=9), through_pauses=False)

    assert ended is not None and ended.code == EXIT_FAILED
    assert ended.text == "superseded by the write at revision 9"


def test_one_exit_code_for_many_a_failure_over_a_pause_over_a_timeout() -> None:
    assert combined([EXIT_OK, EXIT_TIMEOUT, EXIT_PAUSED, EXIT_FAILED]) == EXIT_FAILED
    assert combined([EXIT_TIMEOUT, EXIT_PAUSED]) == EXIT_PAUSED
    assert combined([EXIT_OK, EXIT_TIMEOUT]) == EXIT_TIMEOUT
    assert combined([EXIT_OK, EXIT_OK]) == EXIT_OK
    assert combined([]) == EXIT_OK


def test_revisions_and_the_current_wave_as_the_tables_show_them() -> None:
    assert revisions({"fromRevision": None, "toRevision": 7}) == "new → 7"
    assert revisions({"fromRevision": 4, "toRevision": 7}) == "4 → 7"
    assert current_wave(rollout()["spec"]) == "canary (1/2)"
    assert current_wave(rollout(currentWave=2)["spec"]) == "-"


def test_bake_progress_counts_from_the_bakes_start_up_to_its_length() -> None:
    spec = rollout()["spec"]
    assert bake_progress(spec, 0, NOW) == "30s to bake"
    spec["waves"][0] |= {"bakeStartedAt": (NOW - timedelta(seconds=12)).isoformat(), "requests": 80, "errors": 2}
    assert bake_progress(spec, 0, NOW) == "baked 12s of 30s, 2 of 80 requests 5xx"
    assert bake_progress(spec, 0, NOW + timedelta(minutes=5)).startswith("baked 30s of 30s")
    assert bake_progress(spec, 1, NOW) == ""


def test_lines_say_each_change_once_waves_before_the_rollouts_phase() -> None:
    text = io.StringIO()
    lines = RolloutLines(Console(file=text, width=200))
    first = rollout()
    later = rollout("Succeeded")
    later["spec"]["waves"][0]["state"] = "Succeeded"

    lines.show([(FOLLOWED, first)])
    lines.show([(FOLLOWED, first)])
    lines.show([(FOLLOWED, later)])

    assert text.getvalue().splitlines() == [
        "apis/orders -p shop wave canary Baking",
        "apis/orders -p shop wave canary a Applied",
        "apis/orders -p shop wave rest Waiting",
        "apis/orders -p shop wave rest b Waiting",
        "apis/orders -p shop rollout api-orders Progressing, revision new → 7",
        "apis/orders -p shop wave canary Succeeded",
        "apis/orders -p shop rollout api-orders Succeeded, revision new → 7",
    ]
