"""`meshplane status`: clusters with their presence and lag, and one object's delivery per cluster."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.harness.meshplane import ServerProcess, run_agent, run_server


def meshplane(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "meshplane", *args, "--server", server.url],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_status_shows_clusters_and_an_objects_delivery(tmp_path: Path) -> None:
    with run_server(tmp_path) as server, run_agent(tmp_path, "edge-1", server, labels={"region": "eu"}):
        doc = {
            "kind": "API",
            "metadata": {"name": "orders", "project": "default"},
            "spec": {"basePath": "/orders", "backends": [{"host": "127.0.0.1", "port": 9001}]},
        }
        httpx.put(f"{server.url}/v1/projects/default/apis/orders", json=doc, timeout=10).raise_for_status()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            answer = json.loads(meshplane(server, "status", "api", "orders", "-o", "json").stdout or "[]")
            if [e["state"] for e in answer] == ["Applied"]:
                break
            time.sleep(0.2)
        assert [(e["cluster"], e["state"]) for e in answer] == [("edge-1", "Applied")]

        table = meshplane(server, "status", "api", "orders")
        assert table.returncode == 0
        assert "edge-1" in table.stdout and "Applied" in table.stdout

        clusters = json.loads(meshplane(server, "status", "-o", "json").stdout)
        [edge] = [c for c in clusters if c["name"] == "edge-1"]
        assert edge["connected"] is True
        assert edge["outOfDate"] == 0
        assert "edge-1" in meshplane(server, "status").stdout

        wrong = meshplane(server, "status", "api")
        assert wrong.returncode != 0
