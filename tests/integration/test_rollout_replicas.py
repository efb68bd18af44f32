"""A rollout lives in the store: the replica that leads drives it, alone, and when it is killed -9 mid-rollout
another replica goes on from where it stood."""

from __future__ import annotations

from pathlib import Path

import httpx

from meshplane_testing import documents
from meshplane_testing.eventually import eventually
from meshplane_testing.meshplane import ServerProcess, run_replica, run_server

ENV = {"MESHPLANE_ROLLOUT_INTERVAL": "0.2"}
CLUSTERS = ("c1", "c2", "c3")


def rollout(http: httpx.Client) -> dict:
    return http.get("/v1/projects/default/rollouts/api-orders").json()["spec"]


def moved_here(server: ServerProcess) -> bool:
    return "rollout moved" in server.process.log()


def test_a_rollout_survives_its_leader_killed_mid_bake(tmp_path: Path, shared_database: str) -> None:
    with (
        run_server(tmp_path, shared_database, name="a", env=ENV) as a,
        run_replica(tmp_path, a, shared_database, "b") as b,
    ):
        with a.http() as on_a:
            for cluster in CLUSTERS:  # no agent connects: each wave skips its clusters (offline: Skip) and bakes
                on_a.put(f"/v1/clusters/{cluster}", json={"metadata": {"name": cluster}}).raise_for_status()
            on_a.put("/v1/projects/default/apis/orders", json=documents.api("orders", labels={"tier": "prod"}))
            waves = [{"name": c, "clusters": [c], "bake": "3s"} for c in CLUSTERS]
            policy = {"selector": {"matchLabels": {"tier": "prod"}}, "waves": waves}
            on_a.put(
                "/v1/projects/default/rolloutpolicies/careful",
                json=documents.document("RolloutPolicy", "careful", spec=policy),
            ).raise_for_status()
            changed = documents.api("orders", labels={"tier": "prod"}, basePath="/v2/orders")
            on_a.put("/v1/projects/default/apis/orders", json=changed).raise_for_status()
            eventually(lambda: rollout(on_a)["currentWave"] == 1, timeout=15, interval=0.1, what="the second wave")
        # The leader logs a move once its write commits, so a reader may see the move just before the log has it.
        leader = eventually(lambda: next((s for s in (a, b) if moved_here(s)), None), timeout=5, what="the move logged")
        survivor = b if leader is a else a
        assert not moved_here(survivor)  # one replica drives a rollout
        leader.process.kill()
        with survivor.http() as on_survivor:
            at_kill = rollout(on_survivor)
            assert at_kill["phase"] == "Progressing"
            done = eventually(
                lambda: (spec := rollout(on_survivor))["phase"] == "Succeeded" and spec,
                timeout=30,
                interval=0.2,
                what="the rollout to finish on the surviving replica",
            )
        assert [w["state"] for w in done["waves"]] == ["Succeeded"] * 3
        assert done["released"] == list(CLUSTERS)
        assert moved_here(survivor)
