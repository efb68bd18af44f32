"""`meshplane status`: clusters with their presence and lag, and one object's delivery per cluster."""

from __future__ import annotations

import json
import time
from pathlib import Path

from meshplane_testing.cli import meshplane
from meshplane_testing.meshplane import run_agent, run_server


def test_status_shows_clusters_and_an_objects_delivery(tmp_path: Path) -> None:
    with run_server(tmp_path) as server, run_agent(tmp_path, "edge-1", server, labels={"region": "eu"}):
        doc = {
            "kind": "API",
            "metadata": {"name": "orders", "project": "default"},
            "spec": {"basePath": "/orders", "backends": [{"host": "127.0.0.1", "port": 9001}]},
        }
        with server.http() as http:
            http.put("/v1/projects/default/apis/orders", json=doc).raise_for_status()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            answer = json.loads(meshplane("status", "api", "orders", "-o", "json", server=server).stdout or "[]")
            if [e["state"] for e in answer] == ["Applied"]:
                break
            time.sleep(0.2)
        assert [(e["cluster"], e["state"]) for e in answer] == [("edge-1", "Applied")]

        table = meshplane("status", "api", "orders", server=server)
        assert table.returncode == 0
        assert "edge-1" in table.stdout and "Applied" in table.stdout

        clusters = json.loads(meshplane("status", "-o", "json", server=server).stdout)
        [edge] = [c for c in clusters if c["name"] == "edge-1"]
        assert edge["connected"] is True
        assert edge["outOfDate"] == 0
        assert "edge-1" in meshplane("status", server=server).stdout

        wrong = meshplane("status", "api", server=server)
        assert wrong.returncode != 0
