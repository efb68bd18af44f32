"""The north API over HTTPS: given a certificate it serves TLS only, and the CLI trusts a private CA
when told to (`--cacert`, `MESHPLANE_CACERT`), failing with a message, not a traceback, when not."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from meshplane_testing.meshplane import MESHPLANE, ServerProcess, run_server

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def north(tmp_path: Path) -> Iterator[ServerProcess]:
    with run_server(tmp_path, https=True) as server:
        yield server


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MESHPLANE_")}
    return subprocess.run(
        [*MESHPLANE, *args], capture_output=True, text=True, timeout=30, check=False, env={**clean, **env}
    )


def test_the_cli_reaches_an_https_server_that_its_cacert_vouches_for(north: ServerProcess) -> None:
    token = {"MESHPLANE_TOKEN": north.token}

    given = cli("get", "apis", "--server", north.url, "--cacert", str(north.pki.ca_certificate), env=token)
    from_env = cli(
        "get", "projects", "--server", north.url, env={**token, "MESHPLANE_CACERT": str(north.pki.ca_certificate)}
    )

    assert given.returncode == 0, given.stderr
    assert "NAME" in given.stdout
    assert from_env.returncode == 0, from_env.stderr
    assert "default" in from_env.stdout


def test_without_cacert_the_cli_says_the_certificate_is_not_trusted(north: ServerProcess) -> None:
    refused = cli("get", "apis", "--server", north.url, env={"MESHPLANE_TOKEN": north.token})

    assert refused.returncode == 1
    assert "Traceback" not in refused.stderr
    assert "not trusted" in refused.stderr
    assert "--cacert" in refused.stderr


def test_a_cacert_that_does_not_exist_is_named(north: ServerProcess, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.crt"

    refused = cli("get", "apis", "--server", north.url, "--cacert", str(missing), env={"MESHPLANE_TOKEN": north.token})

    assert refused.returncode == 1
    assert "Traceback" not in refused.stderr
    assert str(missing) in refused.stderr


def test_httpx_verifies_the_north_api_against_the_servers_ca(north: ServerProcess) -> None:
    with north.http() as http:
        assert http.get("/readyz").status_code == 200
        assert http.get("/v1/projects").status_code == 200
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(f"{north.url}/healthz", timeout=5)


def test_plain_http_is_not_served_on_the_https_port(north: ServerProcess) -> None:
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{north.http_port}/healthz", timeout=5)
