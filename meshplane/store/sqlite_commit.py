"""Group commits on SQLite in two trips to a thread of their own.

Through the async driver every statement of a commit is a trip to the database's thread and back, and a group
commit makes ten (BEGIN IMMEDIATE, the revision, the rows, objects, events, history, audit, the revision
again, COMMIT): most of a lone write's time. Here one trip takes the write lock and reads the revision and
the named rows, the decisions run on the event loop, and one more trip writes what they recorded and
commits (or rolls back). Values are written as the SQLAlchemy types of `schema` write them, so that every
other reader reads them alike: JSON as text, times as naive UTC text, booleans as 0 and 1.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import JSON, Boolean, Table

from meshplane.audit import Actor
from meshplane.model.stored import ObjectKey, StoredObject
from meshplane.store import queries
from meshplane.store.batch import Change, WriteBatch
from meshplane.store.schema import UTCDateTime, audit, events, history, objects

_BUSY_TIMEOUT_MS = 30_000
_TIME_FORMAT = "%Y-%m-%d %H:%M:%S.%f"
_NO_FENCE = 2**63 - 1

_T = TypeVar("_T")
Column = tuple[str, Callable[[Any], Any]]
Statement = tuple[str, list[Column]]
"""An insert, and the columns its values are given for, in order."""


def _columns(table: Table, codecs: Mapping[type, Callable[[Any], Any]]) -> list[Column]:
    """Each column of `table` in order, with the codec of its type (the value as it is, for other types)."""
    return [
        (column.name, next((codec for kind, codec in codecs.items() if isinstance(column.type, kind)), _same))
        for column in table.columns
    ]


def _same(value: Any) -> Any:
    return value


def _time_text(value: datetime) -> str:
    return value.astimezone(UTC).strftime(_TIME_FORMAT)


def _time_value(text: str) -> datetime:
    return datetime.strptime(text, _TIME_FORMAT).replace(tzinfo=UTC)


def _json_text(value: Any) -> str:
    return json.dumps(value, allow_nan=False)


_WRITTEN: Mapping[type, Callable[[Any], Any]] = {JSON: _json_text, UTCDateTime: _time_text, Boolean: int}
"""How a value is written to a column of each type that needs it, as SQLAlchemy writes it on SQLite."""
_READ_BACK: Mapping[type, Callable[[Any], Any]] = {JSON: json.loads, UTCDateTime: _time_value, Boolean: bool}


def _insert(table: Table, conflict: str = "") -> Statement:
    columns = _columns(table, _WRITTEN)
    names = ", ".join(name for name, _ in columns)
    marks = ", ".join("?" for _ in columns)
    return f"INSERT INTO {table.name} ({names}) VALUES ({marks}){conflict}", columns


_OBJECT_KEY = ("kind", "project", "name")
_UPSERT_OBJECT = _insert(
    objects,
    f" ON CONFLICT ({', '.join(_OBJECT_KEY)}) DO UPDATE SET "
    + ", ".join(f"{c.name} = excluded.{c.name}" for c in objects.columns if c.name not in _OBJECT_KEY),
)
_INSERT_EVENT = _insert(events)
_INSERT_VERSION = _insert(history)
_INSERT_AUDIT = _insert(audit)
_OBJECT_COLUMNS = _columns(objects, _READ_BACK)
_SELECTED = ", ".join(name for name, _ in _OBJECT_COLUMNS)
_READ_NAMED = (
    f"SELECT {_SELECTED} FROM objects WHERE (kind, project, name) IN "
    "(SELECT value ->> 0, value ->> 1, value ->> 2 FROM json_each(?))"
)
_READ_FENCED = (
    f"SELECT {', '.join(chr(39) + '{}' + chr(39) if name == 'status' else name for name, _ in _OBJECT_COLUMNS)} "
    "FROM objects WHERE revision > ? AND +kind IN (SELECT value FROM json_each(?))"
)
"""The rows a fence weighs, without their status (see `queries.fence_rows`), found by the revision index: the
unary `+` keeps SQLite from reading every row of the kinds by the key index instead."""


def _rows(statement: Statement, values: Iterable[dict[str, Any]]) -> list[tuple[Any, ...]]:
    _, columns = statement
    return [tuple(encode(row[name]) for name, encode in columns) for row in values]


class SqliteCommits:
    """The write transactions of group commits, on a connection used from one thread of its own."""

    def __init__(self, database: str) -> None:
        self._database = database
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="meshplane-sqlite-commit")
        self._connection: sqlite3.Connection | None = None

    async def begin(
        self, keys: Iterable[ObjectKey], fence: tuple[int, Iterable[str]] | None
    ) -> tuple[int, list[StoredObject], list[StoredObject]]:
        """Take the write lock; the current revision, the rows of `keys` (tombstones included) and the rows of the
        `fence`'s kinds written after its revision (without their status). The transaction stays open for
        `commit` or `rollback`."""
        wanted = json.dumps(sorted(set(keys)))
        after, kinds = fence if fence is not None else (_NO_FENCE, ())
        fenced_kinds = json.dumps(sorted(set(kinds)))
        return await self._run(lambda db: _begin(db, wanted, after, fenced_kinds))

    async def commit(self, batch: WriteBatch, written: Sequence[tuple[Change, Actor]]) -> None:
        """Write what `batch` recorded in the open transaction and commit it (rolled back if that fails)."""
        fresh, existing = batch.rows()
        versions, entries = queries.history_and_audit_rows(written, batch.now)
        statements = [
            (_UPSERT_OBJECT, _rows(_UPSERT_OBJECT, (queries.object_row(o) for o in (*fresh, *existing)))),
            (_INSERT_EVENT, _rows(_INSERT_EVENT, queries.event_rows(batch.changes, batch.now))),
            (_INSERT_VERSION, _rows(_INSERT_VERSION, versions)),
            (_INSERT_AUDIT, _rows(_INSERT_AUDIT, entries)),
        ]
        await self._run(lambda db: _commit(db, statements, batch.revision))

    def rollback(self) -> asyncio.Future[None]:
        """End the open transaction, if any, without writing: queued behind whatever the thread is doing, so
        that it may be left unawaited by a caller that is being cancelled."""
        return asyncio.wrap_future(self._executor.submit(self._rollback))

    async def close(self) -> None:
        if self._connection is not None:
            await self._run(lambda db: db.close())
            self._connection = None
        self._executor.shutdown(wait=False)

    async def _run(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, lambda: work(self._opened()))

    def _opened(self) -> sqlite3.Connection:
        if self._connection is None:
            connection = sqlite3.connect(self._database, isolation_level=None, check_same_thread=False)
            connection.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            self._connection = connection
        return self._connection

    def _rollback(self) -> None:
        if self._connection is not None and self._connection.in_transaction:
            self._connection.execute("ROLLBACK")


def _begin(
    db: sqlite3.Connection, keys: str, after: int, kinds: str
) -> tuple[int, list[StoredObject], list[StoredObject]]:
    db.execute("BEGIN IMMEDIATE")
    try:
        (revision,) = db.execute("SELECT revision FROM meta WHERE id = 1").fetchone()
        named = db.execute(_READ_NAMED, (keys,)).fetchall()
        fenced = db.execute(_READ_FENCED, (after, kinds)).fetchall() if after != _NO_FENCE else []
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return revision, _objects(named), _objects(fenced)


def _objects(rows: list[tuple[Any, ...]]) -> list[StoredObject]:
    return [
        StoredObject(**{name: decode(value) for (name, decode), value in zip(_OBJECT_COLUMNS, row, strict=True)})
        for row in rows
    ]


def _commit(db: sqlite3.Connection, statements: list[tuple[Statement, list[tuple]]], revision: int) -> None:
    try:
        for (statement, _), rows in statements:
            if rows:
                db.executemany(statement, rows)
        db.execute("UPDATE meta SET revision = ? WHERE id = 1", (revision,))
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
