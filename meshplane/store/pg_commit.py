"""A group commit on PostgreSQL in two statements, outside any transaction.

The first reads the current revision and the named rows together (one statement is one snapshot). The
decisions run in memory. The second writes every row, event, version and audit entry they recorded, and
commits only if the revision is still the one read: its first step moves `meta` from that revision to the
new one, and every insert depends on that step having found it (compare-and-set). Another writer's commit
in between, on this replica or another, makes the write a no-op, and the group is read and decided again.
The locked transaction (`SELECT ... FOR UPDATE` on `meta`, then a statement per table) takes ten round trips
where this takes two; it stays for SQLite, and for a group that keeps losing the race.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterable, Sequence
from datetime import datetime
from typing import Any

import asyncpg

from meshplane.audit import Actor
from meshplane.model.stored import ObjectKey, StoredObject
from meshplane.store import queries
from meshplane.store.batch import Change, WriteBatch
from meshplane.store.schema import objects

_NO_FENCE = 2**63 - 1
"""A revision no row is written after: the read's second half finds nothing."""

_COLUMNS = [column.name for column in objects.columns]
_READ = f"""
SELECT m.revision AS meta_revision, o.*
FROM meta m LEFT JOIN LATERAL (
    SELECT true AS named, {", ".join(_COLUMNS)} FROM objects
    WHERE (kind, project, name) IN (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]))
    UNION ALL
    SELECT false, {", ".join("'{}'::jsonb" if name == "status" else name for name in _COLUMNS)} FROM objects
    WHERE revision > $4 AND kind = ANY($5::text[])
) o ON true
WHERE m.id = 1
"""
"""The revision, the named rows, and the rows a fence weighs (without their status: see `queries.fence_rows`)."""

_UPDATED = (
    "uid",
    "revision",
    "generation",
    "origin",
    "labels",
    "annotations",
    "spec",
    "status",
    "created_at",
    "updated_at",
    "deleted",
)

_WRITE = f"""
WITH moved AS (
    UPDATE meta SET revision = $1 WHERE id = 1 AND revision = $2 RETURNING revision
), written AS (
    INSERT INTO objects SELECT * FROM jsonb_populate_recordset(NULL::objects, $3::text::jsonb)
    WHERE EXISTS (SELECT FROM moved)
    ON CONFLICT (kind, project, name) DO UPDATE SET {", ".join(f"{c} = EXCLUDED.{c}" for c in _UPDATED)}
), logged AS (
    INSERT INTO events SELECT * FROM jsonb_populate_recordset(NULL::events, $4::text::jsonb)
    WHERE EXISTS (SELECT FROM moved)
), versions AS (
    INSERT INTO history SELECT * FROM jsonb_populate_recordset(NULL::history, $5::text::jsonb)
    WHERE EXISTS (SELECT FROM moved)
), audited AS (
    INSERT INTO audit SELECT * FROM jsonb_populate_recordset(NULL::audit, $6::text::jsonb)
    WHERE EXISTS (SELECT FROM moved)
)
SELECT pg_notify($7, $8) FROM moved
"""


class CommitConnection:
    """The connection group commits take (they take it one group at a time), opened when first needed and again
    after it failed: a pool's checkout and return cost more than the two statements' round trips."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._connection: asyncpg.Connection | None = None

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[asyncpg.Connection]:
        if self._connection is None or self._connection.is_closed():
            connection = await asyncpg.connect(self._dsn)
            await connection.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")
            self._connection = connection
        try:
            yield self._connection
        except (OSError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError):
            await self.close()
            raise

    async def close(self) -> None:
        if self._connection is not None:
            with contextlib.suppress(Exception):
                await self._connection.close()
            self._connection = None


async def read(
    conn: asyncpg.Connection, keys: Iterable[ObjectKey], fence: tuple[int, Iterable[str]] | None
) -> tuple[int, list[StoredObject], list[StoredObject]]:
    """The current revision, and in the same snapshot the rows of `keys` (tombstones included) and the rows of
    the `fence`'s kinds written after its revision (without their status)."""
    wanted = sorted(set(keys))
    after, kinds = fence if fence is not None else (_NO_FENCE, ())
    records = await conn.fetch(
        _READ, [k[0] for k in wanted], [k[1] for k in wanted], [k[2] for k in wanted], after, sorted(set(kinds))
    )
    named: list[StoredObject] = []
    fenced: list[StoredObject] = []
    for record in records:
        if record["kind"] is not None:
            (named if record["named"] else fenced).append(StoredObject(**{name: record[name] for name in _COLUMNS}))
    return records[0]["meta_revision"], named, fenced


async def write(
    conn: asyncpg.Connection,
    read_at: int,
    batch: WriteBatch,
    written: Sequence[tuple[Change, Actor]],
    channel: str,
    payload: str,
) -> bool:
    """Commit what `batch` recorded if the revision is still `read_at`, announcing it on `channel`; False
    (nothing written) when another writer committed since."""
    fresh, existing = batch.rows()
    versions, entries = queries.history_and_audit_rows(written, batch.now)
    moved = await conn.fetch(
        _WRITE,
        batch.revision,
        read_at,
        _json([queries.object_row(o) for o in (*fresh, *existing)]),
        _json(queries.event_rows(batch.changes, batch.now)),
        _json(versions),
        _json(entries),
        channel,
        payload,
    )
    return bool(moved)


def _json(rows: list[dict[str, Any]]) -> str:
    return json.dumps(rows, default=_timestamp, allow_nan=False)


def _timestamp(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not a column value")
