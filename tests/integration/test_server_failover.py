"""An agent given several server replicas: it syncs with one, and when that one is killed it moves to another
and keeps converging, over mTLS checked against each replica's certificate."""

from __future__ import annotations

import shutil
from pathlib import Path

from meshplane_testing import documents
from meshplane_testing.eventually import eventually
from meshplane_testing.meshplane import ServerProcess, run_agent, run_server


def applied(server: ServerProcess, name: str) -> bool:
    with server.http() as http:
        entries = http.get(f"/v1/projects/default/apis/{name}").json().get("status", {}).get("clusters", [])
    return [entry["state"] for entry in entries] == ["Applied"]


def registered_here(server: ServerProcess, cluster: str) -> bool:
    return any("cluster registered" in line and cluster in line for line in server.process.log().splitlines())


def test_an_agent_moves_to_another_replica_when_its_own_is_killed(tmp_path: Path, shared_database: str) -> None:
    with run_server(tmp_path, shared_database, name="a") as a:
        shutil.copytree(a.data_dir / "pki", tmp_path / "b" / "pki")
        shutil.copy(a.data_dir / "admin-token", tmp_path / "b" / "admin-token")
        # Each replica's certificate covers localhost (here they share one): the name the agent checks.
        with (
            run_server(tmp_path, shared_database, name="b") as b,
            run_agent(tmp_path, "edge-1", [a, b], extra=["--tls-server-name", "localhost"]),
        ):
            a.put(documents.api("before", placement={"clusters": ["edge-1"]}))
            eventually(lambda: applied(a, "before"), timeout=30, what="the first API applied")
            own, other = (a, b) if registered_here(a, "edge-1") else (b, a)
            assert registered_here(own, "edge-1") and not registered_here(other, "edge-1")

            own.process.kill()
            other.put(documents.api("after", placement={"clusters": ["edge-1"]}))
            eventually(lambda: applied(other, "after"), timeout=30, what="the API written after the kill applied")
            assert applied(other, "before")
