"""Engines per backend, set up so that writers serialize and readers see one consistent snapshot.

SQLite: the file is created 0600 (SQLite gives its -wal and -shm the database file's mode) and an existing
store's files are tightened to that when opened: they hold every object and token digest. WAL lets readers
run beside the single writer; the driver's own BEGIN handling is switched off and write transactions start
with BEGIN IMMEDIATE, so they take the write lock up front (waiting on busy_timeout for other processes)
instead of failing half-way when a deferred transaction tries to upgrade its lock.
PostgreSQL: writers serialize on the `meta` row lock; readers ask for REPEATABLE READ.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from meshplane import secret_files

_WRITE = "meshplane_write"
_BUSY_TIMEOUT_MS = 30_000
_WAL_ATTEMPTS = 25


@dataclass(frozen=True, slots=True)
class Engines:
    """One pool, two ways in: `write` for transactions that change rows, `read` for snapshots."""

    base: AsyncEngine
    write: AsyncEngine
    read: AsyncEngine

    @property
    def dialect(self) -> str:
        return self.base.dialect.name


def create_engines(url: str) -> Engines:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite(url, parsed.database)
    if parsed.get_backend_name() == "postgresql":
        base = create_async_engine(url)
        return Engines(base, base, base.execution_options(isolation_level="REPEATABLE READ"))
    raise ValueError(f"unsupported database URL {parsed.render_as_string(hide_password=True)!r}")


def _enable_wal(cursor: Any) -> None:
    """Switch the file to WAL. The switch needs the file to itself and SQLite does not wait for it
    (busy_timeout does not apply), so connections racing to open a new file retry a few times."""
    for attempt in range(_WAL_ATTEMPTS):
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except Exception as exc:
            if "locked" not in str(exc) or attempt == _WAL_ATTEMPTS - 1:
                raise
            time.sleep(0.02 * (attempt + 1))


def _private_files(database: Path) -> None:
    """Only the server's user may read or write the store's files."""
    secret_files.ensure_private(database)
    secret_files.tighten(database.with_name(f"{database.name}-wal"))
    secret_files.tighten(database.with_name(f"{database.name}-shm"))


def _sqlite(url: str, database: str | None) -> Engines:
    if not database or database == ":memory:":
        raise ValueError("the SQLite store needs a file path: WAL and cross-process locking need a file")
    Path(database).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    _private_files(Path(database))
    base = create_async_engine(url)

    @event.listens_for(base.sync_engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
        _enable_wal(cursor)
        cursor.close()

    @event.listens_for(base.sync_engine, "begin")
    def _begin(connection: Connection) -> None:
        immediate = connection.get_execution_options().get(_WRITE, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return Engines(base, base.execution_options(**{_WRITE: True}), base)
