"""kill -9 of the management server in the middle of a burst of writes and pushes, round after round.

The server restarts on the same ports with the same store each time, so the agent reconnects to the
same address. After every restart: each write the server acknowledged is in the store, and the
agent holds exactly what the store places on its cluster.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from meshplane_testing.faults import kill_rounds

ROUNDS = {"sqlite": 8, "postgresql": 5}
"""Rounds per store, each about 4-7 s on two loaded cores (well inside the timeout); `bench/kill_rounds.py`
runs many more (`--rounds 100`, `--postgres`)."""


@pytest.mark.timeout(150)
def test_server_killed_mid_burst_loses_no_acknowledged_write_and_the_agent_converges(
    tmp_path: Path, server_database: str | None
) -> None:
    store = "sqlite" if server_database is None else "postgresql"
    rounds = kill_rounds(tmp_path, ROUNDS[store], database_url=server_database)

    assert len(rounds) == ROUNDS[store]
    lost = [problem for r in rounds for problem in r.lost]
    assert not lost, "acknowledged writes missing after kill -9:\n" + "\n".join(lost)
    # Each round really killed the server mid-burst: some writes were answered, some were not.
    assert all(r.acknowledged > 0 for r in rounds)
    assert sum(r.unanswered for r in rounds) > 0
    times = sorted(r.converge_s for r in rounds)
    print(
        f"\n{store}: {len(rounds)} kill rounds: converge p50 {statistics.median(times):.2f}s max {times[-1]:.2f}s; "
        f"restart p50 {statistics.median(r.restart_s for r in rounds):.2f}s; "
        f"acknowledged {sum(r.acknowledged for r in rounds)}, unanswered {sum(r.unanswered for r in rounds)}"
    )
