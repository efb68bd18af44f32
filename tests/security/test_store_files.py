"""Files that hold the store or a secret are readable by the server's user only."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from meshplane.store.store import Store
from meshplane_testing.meshplane import run_server

pytestmark = pytest.mark.timeout(60)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_store_its_wal_and_the_servers_secrets_are_0600_after_a_start(tmp_path: Path) -> None:
    old = os.umask(0o022)  # the usual umask, under which files are created 0644 unless asked otherwise
    try:
        with run_server(tmp_path) as server, server.http() as http:
            assert http.get("/v1/projects").status_code == 200
            data = server.data_dir
            store = [data / "meshplane.db", data / "meshplane.db-wal", data / "meshplane.db-shm"]
            secrets = [data / "admin-token", *(data / "signing").glob("*.pem"), *(data / "pki").rglob("*.key")]
            modes = {path.name: mode(path) for path in [*store, *secrets]}
    finally:
        os.umask(old)
    assert len(secrets) >= 3, secrets
    assert modes == {name: 0o600 for name in modes}
    assert mode(data) == 0o700


async def test_existing_store_files_are_tightened_when_the_store_opens(tmp_path: Path) -> None:
    database = tmp_path / "meshplane.db"
    url = f"sqlite+aiosqlite:///{database}"
    first = await Store.open(url)
    await first.create("Project", "", "shop", spec={})
    wal = database.with_name("meshplane.db-wal")
    for path in (database, wal):
        path.chmod(0o644)
    await first.close()
    database.chmod(0o644)
    reopened = await Store.open(url)
    try:
        await reopened.get("Project", "", "shop")
        present = [path for path in (database, wal, database.with_name("meshplane.db-shm")) if path.exists()]
        assert {path.name: mode(path) for path in present} == {path.name: 0o600 for path in present}
    finally:
        await reopened.close()
