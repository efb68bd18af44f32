"""The pure cores (placement, projection, rendering, translation) import no I/O: no store, web framework,
gRPC, tracing or HTTP client. Each is imported in a fresh interpreter, so what another test loaded does not
hide what the module itself pulls in; `make lint` runs this file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import meshplane

ROOT = Path(meshplane.__file__).resolve().parent.parent
IO_PACKAGES = ("sqlalchemy", "fastapi", "starlette", "grpc", "opentelemetry", "asyncpg", "httpx", "aiosqlite")
MESSAGE_ONLY = ("opentelemetry.proto",)
"""Generated message types inside an I/O package's namespace: data, which Envoy's OTLP access-log config
embeds; no exporter, tracer or channel comes with them."""
PURE_CORES = (
    "meshplane.server.placement",
    "meshplane.server.projection",
    "meshplane.server.api_conflicts",
    "meshplane.server.manifests",
    "meshplane.server.render.cluster",
    "meshplane.server.render.offline",
    "meshplane.agent.translate",
    "meshplane.gatewayapi.program",
    "meshplane.model.stored",
)
RENDER_WITH_THE_CLI = """
import sys
from typer.testing import CliRunner
from meshplane.cli import app
result = CliRunner().invoke(app, ["render", "-f", sys.argv[1], "--cluster", "east"])
assert result.exit_code == 0, result.output
"""
CLUSTER = "apiVersion: meshplane.io/v1alpha1\nkind: Cluster\nmetadata: {name: east}\nspec: {}\n"


def loaded_modules(code: str, *args: str) -> set[str]:
    """Every module in `sys.modules` once `code` has run in a fresh interpreter."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", probe, *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.splitlines()[-1]))


def loaded_io_packages(code: str, *args: str) -> list[str]:
    """The I/O packages loaded once `code` has run in a fresh interpreter."""
    loaded = loaded_modules(code, *args)
    messages = {module for module in loaded if module.startswith(MESSAGE_ONLY)}
    namespaces = {prefix.split(".")[0] for prefix in MESSAGE_ONLY}
    behaviour = loaded - messages - namespaces
    return sorted({module.split(".")[0] for module in behaviour} & set(IO_PACKAGES))


@pytest.mark.parametrize("module", PURE_CORES)
def test_a_pure_core_imports_no_io(module: str) -> None:
    assert loaded_io_packages(f"import {module}") == []


@pytest.mark.parametrize(
    ("module", "other_side"),
    [
        ("meshplane.server.api_conflicts", "meshplane.agent"),
        ("meshplane.server.projection", "meshplane.agent"),
        ("meshplane.server.render.offline", "meshplane.agent"),
        ("meshplane.agent.translate", "meshplane.server"),
    ],
)
def test_the_server_and_agent_cores_share_values_only_through_the_model(module: str, other_side: str) -> None:
    assert not {name for name in loaded_modules(f"import {module}") if name.startswith(other_side)}


def test_meshplane_render_loads_no_server(tmp_path: Path) -> None:
    """`meshplane render` needs no server: neither its web framework nor its store (the CLI module itself
    carries the client's HTTP and gRPC libraries, for the commands that talk to a server)."""
    files = tmp_path / "fleet.yaml"
    files.write_text(CLUSTER)
    loaded = loaded_io_packages(RENDER_WITH_THE_CLI, str(files))
    assert not {"fastapi", "starlette", "sqlalchemy", "asyncpg", "aiosqlite", "opentelemetry"} & set(loaded)
