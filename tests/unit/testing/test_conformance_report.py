"""A conformance run is judged against the committed report: the same results pass, any other fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from meshplane_testing.conformance import disagreement


def report(path: Path, passed: int, failed: list[str], at: str) -> Path:
    core: dict[str, Any] = {
        "result": "failure" if failed else "success",
        "statistics": {"Passed": passed, "Failed": len(failed), "Skipped": 0},
        "failedTests": failed,
    }
    document = {
        "gatewayAPIVersion": "v1.6.3",
        "gatewayAPIChannel": "standard",
        "mode": "default",
        "date": at,
        "profiles": [{"name": "GATEWAY-HTTP", "core": core}],
    }
    path.write_text(yaml.safe_dump(document))
    return path


def test_a_run_with_the_committed_results_agrees_whenever_it_ran(tmp_path: Path) -> None:
    committed = report(tmp_path / "committed.yaml", 36, [], "2026-11-30T10:00:00Z")
    run = report(tmp_path / "run.yaml", 36, [], "2026-12-02T08:00:00Z")

    assert disagreement(run, committed) == []


def test_a_run_that_fails_a_test_the_committed_report_passes_is_named(tmp_path: Path) -> None:
    committed = report(tmp_path / "committed.yaml", 36, [], "2026-11-30T10:00:00Z")
    run = report(tmp_path / "run.yaml", 35, ["HTTPRouteWeight"], "2026-12-02T08:00:00Z")

    found = disagreement(run, committed)

    assert "-   GATEWAY-HTTP core: success (passed 36, failed 0, skipped 0)" in found
    assert "+     failed: HTTPRouteWeight" in found


def test_without_a_committed_report_a_run_disagrees(tmp_path: Path) -> None:
    run = report(tmp_path / "run.yaml", 36, [], "2026-12-02T08:00:00Z")

    assert disagreement(run, tmp_path / "missing.yaml") == [f"- (no committed report at {tmp_path / 'missing.yaml'})"]
