"""An agent offline through thousands of changes catches up in one round, with bytes in proportion to
the distinct objects it ends up with, not to the number of changes it missed."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from meshplane_testing.convergence import assert_converged, held_bytes, store_apis
from meshplane_testing.eventually import eventually
from meshplane_testing.faults import Write, Writers, applied_updates, projection_matches_store
from meshplane_testing.meshplane import run_agent, run_server
from meshplane_testing.tcp_proxy import run_tcp_proxy

CLUSTER = "edge-offline"
NAMES = 300
CHANGES = 3000


def offline_change(i: int, rng: random.Random) -> Write:
    """Change number `i`: a delete one time in ten, else a PUT that gives the API a new backend port."""
    name = f"api-{i % NAMES:03d}"
    return Write("DELETE", name) if rng.random() < 0.1 else Write("PUT", name, port=20_000 + i)


@pytest.mark.timeout(120)
def test_offline_cluster_catches_up_in_one_round(tmp_path: Path) -> None:
    rng = random.Random(7)
    state_dir = tmp_path / f"agent-{CLUSTER}"
    with run_server(tmp_path) as server, Writers(server, workers=8) as writers:
        # Online: the agent holds the first two thirds of the names.
        with run_agent(tmp_path, CLUSTER, server.grpc_address):
            writers.run([Write("PUT", f"api-{i:03d}", port=10_000 + i) for i in range(NAMES * 2 // 3)])
            assert_converged(server, state_dir, CLUSTER, 30)

        # Offline: thousands of changes over all the names, about one in ten a delete.
        changes = [offline_change(i, rng) for i in range(CHANGES)]
        rng.shuffle(changes)
        answered = writers.run(changes)
        assert all(w.acknowledged or (w.op == "DELETE" and w.status == 404) for w in answered), {
            w.status for w in answered
        }
        eventually(
            lambda: projection_matches_store(server, CLUSTER),
            timeout=30,
            what="the server's projection to take every change",
        )

        # Back online, through a proxy that counts what the server sends.
        with run_tcp_proxy(server.grpc_port) as proxy:
            log_offset = len(applied_updates((tmp_path / f"agent-{CLUSTER}.log").read_text()))
            with run_agent(tmp_path, CLUSTER, proxy.address) as agent:
                took = assert_converged(server, state_dir, CLUSTER, 30)
                updates = applied_updates(agent.process.log())[log_offset:]
                sent = proxy.bytes_downstream

        distinct = held_bytes(state_dir)
        held = len(store_apis(server, CLUSTER))
        print(
            f"\noffline agent: {CHANGES} changes over {NAMES} names, {held} held at the end; caught up in "
            f"{took:.2f}s with {len(updates)} API update(s) ({updates[0]['upserts'] if updates else 0} upserts, "
            f"{updates[0]['removed'] if updates else 0} removals); server->agent {sent} bytes, "
            f"distinct objects {distinct} bytes ({sent / distinct:.2f}x)"
        )
        assert len(updates) == 1, f"caught up in {len(updates)} rounds: {updates}"
        assert sent <= 2 * distinct, f"{sent} bytes sent for {distinct} bytes of distinct objects"
