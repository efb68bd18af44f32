"""Signing in: the brake on failures never locks out a valid credential, the token cache cannot be
flooded, and OIDC is never accepted without an audience."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import httpx
import pytest

from meshplane.model.roles import Role
from meshplane.server.auth.guard import MAX_CLIENTS, FailureBrake
from meshplane.server.auth.tokens import TokenService
from meshplane.server.problems import Problem
from meshplane.store.store import Store
from meshplane_testing.meshplane import run_server, server_argv
from meshplane_testing.process import free_port

pytestmark = pytest.mark.timeout(90)

BOGUS = {"Authorization": "Bearer mpt_0000_guessed"}


def test_a_valid_admin_token_works_after_31_failures_from_its_address(tmp_path: Path) -> None:
    with run_server(tmp_path) as server, httpx.Client(base_url=server.url, timeout=10) as http:
        failures = [http.get("/v1/projects", headers=BOGUS).status_code for _ in range(31)]
        admin = http.get("/v1/projects", headers=server.headers)
        viewer = http.get("/v1/projects/default", headers=server.bearer("viewer", "default"))
        braked = http.get("/v1/projects", headers=BOGUS)
        missing = http.get("/v1/projects")
    assert failures[:30] == [401] * 30 and failures[30] == 429
    assert (admin.status_code, viewer.status_code) == (200, 200)
    assert (braked.status_code, missing.status_code) == (429, 429)
    assert int(braked.headers["retry-after"]) > 0


def test_successes_do_not_count_as_failures(tmp_path: Path) -> None:
    with run_server(tmp_path) as server, httpx.Client(base_url=server.url, timeout=10) as http:
        answers = [http.get("/v1/whoami", headers=server.headers).status_code for _ in range(40)]
        bad = [http.get("/v1/whoami", headers=BOGUS).status_code for _ in range(30)]
    assert set(answers) == {200}
    assert set(bad) == {401}


async def test_the_token_cache_stays_bounded_under_many_bogus_ids(store: Store) -> None:
    tokens = TokenService(store, cache_size=8)
    _, good = await tokens.issue("ci", Role.VIEWER, None)
    assert await tokens.verify(good) is not None
    for index in range(2000):
        assert await tokens.verify(f"mpt_{index:08x}_nope") is None
    assert len(tokens.cache) <= 1
    issued = [(await tokens.issue(f"t{index}", Role.VIEWER, None))[1] for index in range(20)]
    for token in issued:
        assert await tokens.verify(token) is not None
    assert len(tokens.cache) == 8
    assert await tokens.verify(good) is not None  # evicted, read again


async def test_a_cached_token_with_a_wrong_secret_is_refused(store: Store) -> None:
    tokens = TokenService(store)
    record, good = await tokens.issue("ci", Role.VIEWER, None)
    assert await tokens.verify(good) is not None
    assert await tokens.verify(f"mpt_{record.id}_wrong") is None
    assert await tokens.verify(good) is not None


def test_the_brake_remembers_a_bounded_number_of_addresses_and_refuses_only_past_its_limit() -> None:
    brake = FailureBrake(limit=2)
    for index in range(MAX_CLIENTS + 50):
        brake.failed(f"10.{index >> 16 & 255}.{index >> 8 & 255}.{index & 255}")
    assert len(brake.failures) == MAX_CLIENTS
    brake.failed("192.0.2.1")
    brake.failed("192.0.2.1")
    with pytest.raises(Problem) as refused:
        brake.failed("192.0.2.1")
    assert refused.value.status == 429
    assert len(brake.failures["192.0.2.1"]) == 2  # a refused attempt is not counted


def test_the_server_refuses_to_start_oidc_without_an_audience(tmp_path: Path) -> None:
    argv = server_argv(tmp_path / "server", free_port(), free_port())
    env = {"MESHPLANE_OIDC_ISSUER": "https://idp.test", "MESHPLANE_OIDC_JWKS": '{"keys": []}'}
    try:
        ran = subprocess.run(argv, env={**os.environ, **env}, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("the server started with OIDC and no audience")
    assert ran.returncode != 0
    assert "oidc_audience" in ran.stdout + ran.stderr


def test_the_server_starts_oidc_with_an_audience(tmp_path: Path) -> None:
    env = {
        "MESHPLANE_OIDC_ISSUER": "https://idp.test",
        "MESHPLANE_OIDC_JWKS": '{"keys": []}',
        "MESHPLANE_OIDC_AUDIENCE": "meshplane",
    }
    with run_server(tmp_path, env=env) as server, server.http() as http:
        assert http.get("/v1/whoami").status_code == 200
