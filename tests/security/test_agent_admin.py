"""The agent's config dump shows every project's objects on its cluster: where its admin listens beyond
loopback, only a caller with the admin token reads it. (The decision is tested on the agent's admin app;
the tests bind nothing but loopback.)"""

from __future__ import annotations

import contextlib
import json
import stat
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette

from meshplane.agent.bootstrap import envoy_bootstrap
from meshplane.agent.runtime import assemble
from meshplane.config import AgentSettings
from meshplane_testing.meshplane import MESHPLANE, run_agent, run_server


@contextlib.asynccontextmanager
async def app_of_agent(tmp_path: Path, admin_address: str, **settings: object) -> AsyncIterator[Starlette]:
    """The admin app of an agent (assembled, not started) with these settings, as the agent serves it."""
    agent = await assemble(
        AgentSettings(insecure=True, state_dir=tmp_path / "state", admin_address=admin_address, **settings)  # type: ignore[arg-type]
    )
    try:
        yield agent.admin_endpoints()
    finally:
        await agent.close()


@pytest.fixture
async def exposed(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Path]]:
    """A client of the admin app of an agent whose admin listens on every address."""
    async with (
        app_of_agent(tmp_path, "0.0.0.0:18003") as app,
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://agent") as client,
    ):
        yield client, tmp_path / "state" / "admin-token"


async def test_an_exposed_admin_refuses_the_config_dump_without_the_token(
    exposed: tuple[httpx.AsyncClient, Path],
) -> None:
    client, _ = exposed
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic YWRtaW46YWRtaW4="}):
        refused = await client.get("/config_dump", headers=headers)
        assert refused.status_code == 401, refused.text
        assert refused.headers["www-authenticate"].startswith("Bearer")
        assert "objects" not in refused.text


async def test_the_token_made_in_the_state_dir_opens_it_and_probes_stay_open(
    exposed: tuple[httpx.AsyncClient, Path],
) -> None:
    client, token_file = exposed
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    token = token_file.read_text().strip()
    dump = await client.get("/config_dump", headers={"Authorization": f"Bearer {token}"})
    assert dump.status_code == 200 and dump.json()["cluster"] == "default"
    assert (await client.get("/healthz")).status_code == 200
    assert (await client.get("/metrics")).status_code == 200


async def test_a_token_file_given_is_asked_for_even_on_loopback(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-of-the-operator\n")
    async with (
        app_of_agent(tmp_path, "127.0.0.1:18003", admin_token_file=token_file) as app,
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://agent") as client,
    ):
        assert (await client.get("/config_dump")).status_code == 401
        opened = await client.get("/config_dump", headers={"Authorization": "Bearer s3cret-of-the-operator"})
        assert opened.status_code == 200


async def test_an_empty_or_missing_token_file_stops_the_agent_with_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "empty").write_text("\n")
    for path in (tmp_path / "empty", tmp_path / "absent"):
        with pytest.raises(ValueError, match="admin token"):
            async with app_of_agent(tmp_path, "0.0.0.0:18003", admin_token_file=path):
                pass


async def test_on_loopback_the_dump_needs_no_token(tmp_path: Path) -> None:
    async with (
        app_of_agent(tmp_path, "127.0.0.1:18003") as app,
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://agent") as client,
    ):
        assert (await client.get("/config_dump")).status_code == 200
    assert not (tmp_path / "state" / "admin-token").exists()


def test_the_cli_reads_a_protected_dump_with_the_token_file(tmp_path: Path) -> None:
    """End to end: an agent asking for its operator's token, and `meshplane agent config-dump --token-file`."""
    token_file = tmp_path / "admin-token"
    token_file.write_text("operator-token\n")
    with (
        run_server(tmp_path) as server,
        run_agent(tmp_path, "edge-1", server, extra=["--admin-token-file", str(token_file)]) as running,
    ):
        dump = [*MESHPLANE, "agent", "config-dump", "--admin-address", running.admin_address]
        refused = subprocess.run(dump, capture_output=True, text=True, timeout=30)
        assert refused.returncode != 0 and "401" in refused.stderr + refused.stdout
        shown = subprocess.run([*dump, "--token-file", str(token_file)], capture_output=True, text=True, timeout=30)
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["cluster"] == "edge-1"


def test_envoys_admin_in_the_agents_bootstrap_listens_on_loopback_only() -> None:
    for port in (19000, 19001):
        address = envoy_bootstrap("gw-1", "10.0.0.7", 18001, admin_port=port)["admin"]["address"]["socket_address"]
        assert address == {"address": "127.0.0.1", "port_value": port}
