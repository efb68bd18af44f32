"""The SQL the store runs, one statement per function; the store decides when and in which transaction."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, fields
from datetime import datetime
from typing import Any

from sqlalchemy import and_, bindparam, delete, func, insert, or_, select, tuple_, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from meshplane.model.stored import StoredObject
from meshplane.store.batch import Change
from meshplane.store.records import Delivery, Event, TokenRecord
from meshplane.store.schema import deliveries, events, idempotency_keys, meta, objects, server_keys, tokens

_EVENT_COLUMNS = [
    events.c[name] for name in ("revision", "op", "kind", "project", "name", "trace_context", "created_at")
]


_OBJECT_FIELDS = tuple(f.name for f in fields(StoredObject))


def _row(obj: StoredObject) -> dict[str, Any]:
    """An object's column values as they are (no deep copy of spec and status, as `asdict` would make)."""
    return {name: getattr(obj, name) for name in _OBJECT_FIELDS}


def _key(kind: str, project: str, name: str) -> Any:
    return and_(objects.c.kind == kind, objects.c.project == project, objects.c.name == name)


async def next_revision(conn: AsyncConnection, count: int) -> int:
    """Allocate `count` revisions, the last of which is returned (on PostgreSQL under the `meta` row lock that
    serializes writers until commit)."""
    statement = update(meta).where(meta.c.id == 1).values(revision=meta.c.revision + count).returning(meta.c.revision)
    return (await conn.execute(statement)).scalar_one()


async def read_meta(conn: AsyncConnection, *, lock: bool = False) -> tuple[int, int]:
    """(current revision, compaction floor); `lock` also serializes with writers, as next_revision does."""
    statement = select(meta.c.revision, meta.c.compacted_revision).where(meta.c.id == 1)
    row = (await conn.execute(statement.with_for_update() if lock else statement)).one()
    return row.revision, row.compacted_revision


async def set_floor(conn: AsyncConnection, floor: int) -> None:
    await conn.execute(update(meta).where(meta.c.id == 1).values(compacted_revision=floor))


async def load(conn: AsyncConnection, kind: str, project: str, name: str) -> StoredObject | None:
    """The row, tombstone or not."""
    row = (await conn.execute(select(objects).where(_key(kind, project, name)))).one_or_none()
    return StoredObject(**row._mapping) if row is not None else None


_KEYS_PER_STATEMENT = 300
"""(kind, project, name) triples per IN list: well inside every backend's limit on bound parameters."""


async def load_many(
    conn: AsyncConnection, keys: Iterable[tuple[str, str, str]], written_after: tuple[int, Iterable[str]] | None = None
) -> list[StoredObject]:
    """The rows of the given keys that exist, tombstones included, in no particular order; and in the same
    statement as the first keys, with `written_after` (revision, kinds), the rows of those kinds written after
    that revision."""
    wanted = list(keys)
    found: list[StoredObject] = []
    for start in range(0, len(wanted), _KEYS_PER_STATEMENT):
        chunk = wanted[start : start + _KEYS_PER_STATEMENT]
        condition = tuple_(objects.c.kind, objects.c.project, objects.c.name).in_(chunk)
        if written_after is not None and start == 0:
            revision, kinds = written_after
            condition = or_(condition, and_(objects.c.revision > revision, objects.c.kind.in_(list(kinds))))
        found.extend(StoredObject(**row._mapping) for row in await conn.execute(select(objects).where(condition)))
    return found


async def insert_objects(conn: AsyncConnection, born: Iterable[StoredObject]) -> None:
    """Rows for objects that had none: one statement, executed once per row."""
    rows = [_row(o) for o in born]
    if rows:
        await conn.execute(insert(objects), rows)


async def rewrite(conn: AsyncConnection, changed: Iterable[StoredObject]) -> None:
    """Existing rows, each replaced whole by its new state: one statement, executed once per row."""
    statement = update(objects).where(
        objects.c.kind == bindparam("key_kind"),
        objects.c.project == bindparam("key_project"),
        objects.c.name == bindparam("key_name"),
    )
    rows = [{**_row(o), "key_kind": o.kind, "key_project": o.project, "key_name": o.name} for o in changed]
    if rows:
        await conn.execute(statement, rows)


async def append_events(conn: AsyncConnection, changes: Iterable[Change], at: datetime) -> None:
    """One event per change, at the revision the change took."""
    rows = [
        {
            "revision": change.obj.revision,
            "op": change.op,
            "kind": change.obj.kind,
            "project": change.obj.project,
            "name": change.obj.name,
            "trace_context": change.trace_context,
            "created_at": at,
        }
        for change in changes
    ]
    if rows:
        await conn.execute(insert(events), rows)


async def live_objects(
    conn: AsyncConnection,
    kinds: Iterable[str],
    *,
    project: str | None = None,
    after: tuple[str, str] | None = None,
    limit: int | None = None,
) -> list[StoredObject]:
    """Live objects ordered by (kind, project, name), strictly after `after` (a (project, name) pair)."""
    statement = select(objects).where(objects.c.kind.in_(list(kinds)), objects.c.deleted.is_(False))
    if project is not None:
        statement = statement.where(objects.c.project == project)
    if after is not None:
        statement = statement.where(tuple_(objects.c.project, objects.c.name) > tuple_(*after))
    statement = statement.order_by(objects.c.kind, objects.c.project, objects.c.name).limit(limit)
    return [StoredObject(**row._mapping) for row in await conn.execute(statement)]


async def events_after(conn: AsyncConnection, revision: int, limit: int) -> list[Event]:
    statement = select(*_EVENT_COLUMNS).where(events.c.revision > revision).order_by(events.c.revision).limit(limit)
    return [Event(**row._mapping) for row in await conn.execute(statement)]


async def latest_trace_contexts(
    conn: AsyncConnection, kinds: Iterable[str], up_to: int
) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(kind, project, name) -> trace context of the object's latest change of content (status writes aside)
    at or before `up_to`, for objects whose latest change was traced and is still in the log."""
    latest = (
        select(func.max(events.c.revision).label("revision"))
        .where(events.c.kind.in_(list(kinds)), events.c.op != "status", events.c.revision <= up_to)
        .group_by(events.c.kind, events.c.project, events.c.name)
        .subquery()
    )
    statement = select(events.c.kind, events.c.project, events.c.name, events.c.trace_context).join(
        latest, events.c.revision == latest.c.revision
    )
    rows = await conn.execute(statement)
    return {(row.kind, row.project, row.name): row.trace_context for row in rows if row.trace_context}


async def purge(conn: AsyncConnection, up_to: int) -> int:
    """Drop events and tombstones at or below `up_to`; the number of rows removed."""
    removed_events = await conn.execute(delete(events).where(events.c.revision <= up_to))
    removed_tombstones = await conn.execute(
        delete(objects).where(objects.c.deleted.is_(True), objects.c.revision <= up_to)
    )
    return removed_events.rowcount + removed_tombstones.rowcount


async def claim_keys(conn: AsyncConnection, keys: Iterable[str], at: datetime) -> set[str]:
    """Record idempotency keys; the ones recorded now (a key recorded before, or twice here, is claimed once)."""
    wanted = set(keys)
    if not wanted:
        return set()
    seen = await conn.execute(select(idempotency_keys.c.key).where(idempotency_keys.c.key.in_(wanted)))
    fresh = wanted - set(seen.scalars())
    if fresh:
        await conn.execute(insert(idempotency_keys), [{"key": key, "created_at": at} for key in sorted(fresh)])
    return fresh


async def forget_keys(conn: AsyncConnection, before: datetime) -> int:
    return (await conn.execute(delete(idempotency_keys).where(idempotency_keys.c.created_at < before))).rowcount


async def upsert_deliveries(conn: AsyncConnection, reported: Iterable[Delivery]) -> None:
    """Insert or replace each cluster's delivery of each object: one statement for the whole report (the last
    of several reports of one object wins)."""
    rows = list({(d.cluster, d.kind, d.project, d.name): asdict(d) for d in reported}.values())
    if not rows:
        return
    statement = (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(deliveries)
    statement = statement.on_conflict_do_update(
        index_elements=[deliveries.c.cluster, deliveries.c.kind, deliveries.c.project, deliveries.c.name],
        set_={column: statement.excluded[column] for column in ("version", "state", "message", "updated_at")},
    )
    await conn.execute(statement, rows)


async def deliveries_changed(conn: AsyncConnection, since: datetime | None) -> list[Delivery]:
    """Deliveries updated after `since` (all of them when None), oldest change first."""
    statement = select(deliveries).order_by(deliveries.c.updated_at)
    if since is not None:
        statement = statement.where(deliveries.c.updated_at > since)
    return [Delivery(**row._mapping) for row in await conn.execute(statement)]


async def deliveries_of(conn: AsyncConnection, keys: Iterable[tuple[str, str, str]]) -> list[Delivery]:
    """Every cluster's delivery of the given (kind, project, name) objects."""
    wanted = list(keys)
    if not wanted:
        return []
    statement = select(deliveries).where(tuple_(deliveries.c.kind, deliveries.c.project, deliveries.c.name).in_(wanted))
    return [Delivery(**row._mapping) for row in await conn.execute(statement)]


async def drop_deliveries(conn: AsyncConnection, kind: str, project: str, name: str) -> None:
    await conn.execute(
        delete(deliveries).where(deliveries.c.kind == kind, deliveries.c.project == project, deliveries.c.name == name)
    )


async def last_revision_before(conn: AsyncConnection, at: datetime) -> int | None:
    """The newest event revision written before `at`, if any: where a time-based compaction may cut."""
    statement = select(events.c.revision).where(events.c.created_at < at).order_by(events.c.revision.desc()).limit(1)
    return (await conn.execute(statement)).scalar_one_or_none()


async def insert_token(conn: AsyncConnection, token: TokenRecord) -> None:
    await conn.execute(insert(tokens).values(**asdict(token)))


async def load_tokens(conn: AsyncConnection, token_id: str | None = None) -> list[TokenRecord]:
    query = select(tokens).order_by(tokens.c.created_at, tokens.c.id)
    if token_id is not None:
        query = query.where(tokens.c.id == token_id)
    return [TokenRecord(**row._mapping) for row in await conn.execute(query)]


async def revoke_token(conn: AsyncConnection, token_id: str) -> int:
    return (await conn.execute(update(tokens).where(tokens.c.id == token_id).values(revoked=True))).rowcount


async def load_server_key(conn: AsyncConnection, name: str) -> bytes | None:
    return (await conn.execute(select(server_keys.c.key).where(server_keys.c.name == name))).scalar_one_or_none()


async def insert_server_key(conn: AsyncConnection, name: str, key: bytes, at: datetime) -> None:
    await conn.execute(insert(server_keys).values(name=name, key=key, created_at=at))
