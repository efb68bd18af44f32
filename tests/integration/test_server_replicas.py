"""Several server replicas on one PostgreSQL: writes on any replica reach agents on any replica, and
background work (status roll-up) moves to a surviving replica when the leader dies."""

from __future__ import annotations

import shutil
from pathlib import Path

from meshplane_testing import documents
from meshplane_testing.eventually import eventually
from meshplane_testing.meshplane import ServerProcess, run_agent, run_server
from meshplane_testing.races import race_puts, rival_apis


def put_api(server: ServerProcess, name: str, cluster: str) -> None:
    """API `name` placed on `cluster` alone."""
    server.put(documents.api(name, placement={"clusters": [cluster]}))


def wait_all_applied(server: ServerProcess, names: list[str], timeout: float = 30.0) -> None:
    """Every API reports Applied at its current version on its one placed cluster."""
    pending = set(names)
    with server.http() as http:

        def all_applied() -> bool:
            for name in sorted(pending):
                obj = http.get(f"/v1/projects/default/apis/{name}").json()
                entries = obj.get("status", {}).get("clusters", [])
                if [e["state"] for e in entries] == ["Applied"]:
                    pending.discard(name)
            return not pending

        eventually(all_applied, timeout=timeout, interval=0.2, what=f"APIs {sorted(names)} applied")


def leads(server: ServerProcess) -> bool:
    """What the replica's `meshplane_leader` gauge says."""
    return server.scrape().total("meshplane_leader") == 1


def test_two_replicas_serve_one_fleet_and_background_work_survives_the_leader(
    tmp_path: Path, shared_database: str
) -> None:
    with run_server(tmp_path, shared_database, name="a") as a:
        # Replicas share one CA, as they would share a Secret in a cluster, and the admin token: only
        # the first replica writes one (the store has a token when the second starts).
        shutil.copytree(a.data_dir / "pki", tmp_path / "b" / "pki")
        shutil.copy(a.data_dir / "admin-token", tmp_path / "b" / "admin-token")
        with (
            run_server(tmp_path, shared_database, name="b") as b,
            run_agent(tmp_path, "edge-1", a) as _,
            run_agent(tmp_path, "edge-2", b) as _,
        ):
            names = []
            for index in range(12):
                writer = a if index % 2 == 0 else b
                cluster = "edge-1" if index % 3 else "edge-2"
                put_api(writer, f"api-{index}", cluster)
                names.append(f"api-{index}")
            wait_all_applied(b, names)

            # Concurrent writers never lose an update: a stale write is refused on either replica.
            with a.http() as on_a, b.http() as on_b:
                current = on_a.get("/v1/projects/default/apis/api-0").json()
                stale = {**current, "spec": {**current["spec"], "basePath": "/changed"}}
                assert on_b.put("/v1/projects/default/apis/api-0", json=stale).status_code == 200
                assert on_a.put("/v1/projects/default/apis/api-0", json=stale).status_code == 409

            # Kill the replica that leads background work; the survivor takes it over.
            leader, survivor, survivors_cluster = (a, b, "edge-2") if leads(a) else (b, a, "edge-1")
            assert leads(leader) and not leads(survivor)
            leader.process.kill()
            put_api(survivor, "after-the-leader-died", survivors_cluster)
            wait_all_applied(survivor, ["after-the-leader-died"])
            assert leads(survivor)
            assert "this replica leads background work" in survivor.process.log()


def test_apis_racing_for_one_route_through_two_replicas_leave_one(tmp_path: Path, shared_database: str) -> None:
    """Each replica checks against its own view of the store; the write's fence, checked in the transaction,
    makes the loser check again and see the winner."""
    with run_server(tmp_path, shared_database, name="a") as a:
        shutil.copytree(a.data_dir / "pki", tmp_path / "b" / "pki")
        shutil.copy(a.data_dir / "admin-token", tmp_path / "b" / "admin-token")
        with run_server(tmp_path, shared_database, name="b") as b:
            rivals = rival_apis("default", 8)
            codes = race_puts([a, b], rivals)

            assert sorted(codes) == [201] + [409] * (len(rivals) - 1), codes
            with a.http() as http:
                listed = http.get("/v1/projects/default/apis").json()["items"]
            assert len(listed) == 1
