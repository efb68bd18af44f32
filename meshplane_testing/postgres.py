"""A private PostgreSQL server for tests: initdb into a temp dir, loopback only, trust auth, fsync off.

PostgreSQL refuses to run as root, so under root the server runs as the `postgres` system user (created if
missing) and its directory belongs to that user. Each test then gets its own throwaway database.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from meshplane_testing.process import free_port, port_open, require_binary, running

SUPERUSER = "meshplane"
_SERVICE_USER = "postgres"
# tmpfs where there is one: CREATE DATABASE per test copies the template, ten times faster in memory.
_RAM_DIR = "/dev/shm"


@dataclass(frozen=True, slots=True)
class PostgresServer:
    port: int
    user: str = SUPERUSER

    def url(self, dbname: str) -> str:
        """A SQLAlchemy asyncpg URL for one database on this server."""
        return f"postgresql+asyncpg://{self.user}@127.0.0.1:{self.port}/{dbname}"

    async def create_database(self) -> str:
        """A fresh empty database; its URL."""
        name = f"t_{uuid.uuid4().hex}"
        await self._admin(f'CREATE DATABASE "{name}"')
        return self.url(name)

    async def drop_database(self, url: str) -> None:
        """Drop the database behind `url`, cutting off any connection a test left open."""
        name = url.rsplit("/", 1)[1]
        await self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    async def _admin(self, sql: str) -> None:
        conn = await asyncpg.connect(host="127.0.0.1", port=self.port, user=self.user, database="postgres")
        try:
            await conn.execute(sql)
        finally:
            await conn.close()


@contextlib.contextmanager
def start_postgres(log_dir: Path) -> Iterator[PostgresServer]:
    """Start a server (skipping, or failing under CI, without the binaries); stop it and delete it after."""
    postgres = require_binary("postgres", *_packaged_servers())
    initdb = str(Path(postgres).with_name("initdb"))
    as_user = _drop_root(log_dir)
    # Not under pytest's tmp dirs: those are private to root and the server user could not reach them.
    home = Path(tempfile.mkdtemp(prefix="meshplane-pg-", dir=_RAM_DIR if os.access(_RAM_DIR, os.W_OK) else None))
    try:
        sockets = home / "sockets"
        sockets.mkdir()
        if as_user:
            for path in (home, sockets):
                os.chown(path, as_user["user"], as_user["group"])
        data = home / "data"
        _run_to_end(
            [initdb, "-D", str(data), "-U", SUPERUSER, "--auth=trust", "--no-locale", "-E", "UTF8", "--no-sync"],
            log_dir / "initdb.log",
            cwd=home,
            **as_user,
        )
        port = free_port()
        settings = {
            "listen_addresses": "127.0.0.1",
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "max_connections": "200",
        }
        argv = [postgres, "-D", str(data), "-p", str(port), "-k", str(sockets)]
        argv += [arg for key, value in settings.items() for arg in ("-c", f"{key}={value}")]
        with running(argv, log_dir / "postgres.log", cwd=home, **as_user) as server:
            server.wait_ready(
                lambda: port_open(port) and "ready to accept connections" in server.log(),
                timeout=60,
                what=f"postgres on port {port}",
            )
            yield PostgresServer(port)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _packaged_servers() -> list[str]:
    """Debian/Ubuntu install servers per major version off PATH; newest first."""
    found = glob.glob("/usr/lib/postgresql/*/bin/postgres")
    return sorted(found, key=lambda path: [int(part) for part in Path(path).parts[-3].split(".")], reverse=True)


def _drop_root(log_dir: Path) -> dict[str, Any]:
    """Popen arguments that run a child as the unprivileged service user; none when we are not root."""
    if os.geteuid() != 0:
        return {}
    account = _service_account(log_dir)
    return {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}


def _service_account(log_dir: Path) -> pwd.struct_passwd:
    """The system user to run as, created when missing (packaged PostgreSQL installs one already)."""
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(_SERVICE_USER)
    useradd = require_binary("useradd", "/usr/sbin/useradd")
    argv = [useradd, "--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin", _SERVICE_USER]
    with contextlib.suppress(RuntimeError):  # a concurrent test session may have just created it
        _run_to_end(argv, log_dir / "useradd.log")
    return pwd.getpwnam(_SERVICE_USER)


def _run_to_end(argv: Sequence[str], log_path: Path, **popen: Any) -> None:
    with running(argv, log_path, **popen) as process:
        if process.popen.wait(timeout=120) != 0:
            raise RuntimeError(f"{argv[0]} exited with {process.popen.returncode}:\n{process.log()[-4000:]}")
