"""The SQL the store runs, one statement per function; the store decides when and in which transaction."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, fields
from datetime import datetime
from typing import Any

from sqlalchemy import and_, bindparam, case, delete, func, insert, or_, select, text, tuple_, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from meshplane.audit import Actor
from meshplane.model.stored import StoredObject
from meshplane.store.batch import Change
from meshplane.store.records import ApiFigureRecord, AuditEntry, Delivery, Event, HistoryEntry, TokenRecord
from meshplane.store.schema import (
    api_figures,
    audit,
    deliveries,
    events,
    history,
    idempotency_keys,
    meta,
    objects,
    server_keys,
    tokens,
)

_EVENT_COLUMNS = [
    events.c[name] for name in ("revision", "op", "kind", "project", "name", "trace_context", "created_at")
]


_OBJECT_FIELDS = tuple(f.name for f in fields(StoredObject))


def object_row(obj: StoredObject) -> dict[str, Any]:
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


_COLUMNS = ", ".join(column.name for column in objects.columns)
_KEYS_FROM = {
    "postgresql": "SELECT * FROM unnest(CAST(:kinds AS text[]), CAST(:projects AS text[]), CAST(:names AS text[]))",
    "sqlite": "SELECT value ->> 0, value ->> 1, value ->> 2 FROM json_each(:keys)",
}
"""The (kind, project, name) keys a statement is given, as rows: three arrays on PostgreSQL, one JSON list of
triples on SQLite. One parameter however many keys: the statement is the same text every time, and each
database searches its key index once per key."""


_BY_KEY = {
    dialect: text(f"SELECT {_COLUMNS} FROM objects WHERE (kind, project, name) IN ({keys})").columns(*objects.columns)
    for dialect, keys in _KEYS_FROM.items()
}


def _key_parameters(dialect: str, keys: list[tuple[str, str, str]]) -> dict[str, Any]:
    if dialect == "sqlite":
        return {"keys": json.dumps(keys)}
    return {"kinds": [k[0] for k in keys], "projects": [k[1] for k in keys], "names": [k[2] for k in keys]}


async def load_many(conn: AsyncConnection, keys: Iterable[tuple[str, str, str]]) -> list[StoredObject]:
    """The rows of the given keys that exist, tombstones included, in no particular order."""
    dialect = conn.dialect.name
    rows = await conn.execute(_BY_KEY[dialect], _key_parameters(dialect, sorted(set(keys))))
    return [StoredObject(**row._mapping) for row in rows]


_BUT_STATUS = [column for column in objects.columns if column.name != "status"]


async def fence_rows(conn: AsyncConnection, revision: int, kinds: Iterable[str]) -> list[StoredObject]:
    """The rows of `kinds` written after `revision`, each with an empty status: a fence weighs what objects are,
    never their status, which can list a whole fleet (see `batch.Fence`). For PostgreSQL's locked commits;
    SQLite's read theirs in `sqlite_commit`."""
    statement = select(*_BUT_STATUS).where(objects.c.revision > revision, objects.c.kind.in_(sorted(set(kinds))))
    return [StoredObject(**row._mapping, status={}) for row in await conn.execute(statement)]


async def insert_objects(conn: AsyncConnection, born: Iterable[StoredObject]) -> None:
    """Rows for objects that had none: one statement, executed once per row."""
    rows = [object_row(o) for o in born]
    if rows:
        await conn.execute(insert(objects), rows)


async def rewrite(conn: AsyncConnection, changed: Iterable[StoredObject]) -> None:
    """Existing rows, each replaced whole by its new state: one statement, executed once per row."""
    statement = update(objects).where(
        objects.c.kind == bindparam("key_kind"),
        objects.c.project == bindparam("key_project"),
        objects.c.name == bindparam("key_name"),
    )
    rows = [{**object_row(o), "key_kind": o.kind, "key_project": o.project, "key_name": o.name} for o in changed]
    if rows:
        await conn.execute(statement, rows)


def event_rows(changes: Iterable[Change], at: datetime) -> list[dict[str, Any]]:
    """One event per change, at the revision the change took."""
    return [
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


async def append_events(conn: AsyncConnection, changes: Iterable[Change], at: datetime) -> None:
    if rows := event_rows(changes, at):
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


async def delivered_objects(conn: AsyncConnection) -> tuple[set[tuple[str, str, str]], datetime | None]:
    """The (kind, project, name) of every object some cluster reported, and the newest report's time."""
    keys = await conn.execute(select(deliveries.c.kind, deliveries.c.project, deliveries.c.name).distinct())
    newest = await conn.scalar(select(func.max(deliveries.c.updated_at)))
    return {(kind, project, name) for kind, project, name in keys}, newest


async def deliveries_of(conn: AsyncConnection, keys: Iterable[tuple[str, str, str]]) -> list[Delivery]:
    """Every cluster's delivery of the given (kind, project, name) objects."""
    wanted = list(keys)
    if not wanted:
        return []
    statement = select(deliveries).where(tuple_(deliveries.c.kind, deliveries.c.project, deliveries.c.name).in_(wanted))
    return [Delivery(**row._mapping) for row in await conn.execute(statement)]


async def upsert_figures(conn: AsyncConnection, reported: Iterable[ApiFigureRecord], at: datetime) -> None:
    """Keep each cluster's newest figures of each API: a sample older than the one kept is ignored (a retried
    report overtaken by a later one), and a sample whose counts went down counts as a reset."""
    newest: dict[tuple[str, str, str], ApiFigureRecord] = {}
    for figure in reported:
        key = (figure.cluster, figure.project, figure.name)
        if key not in newest or newest[key].sampled_at <= figure.sampled_at:
            newest[key] = figure
    if not newest:
        return
    rows = [{**asdict(figure), "resets": 0, "received_at": at} for figure in newest.values()]
    statement = (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(api_figures)
    incoming = statement.excluded
    went_down = or_(incoming.requests < api_figures.c.requests, incoming.errors < api_figures.c.errors)
    statement = statement.on_conflict_do_update(
        index_elements=[api_figures.c.cluster, api_figures.c.project, api_figures.c.name],
        set_={
            **{column: incoming[column] for column in ("requests", "errors", "by_class", "sampled_at", "received_at")},
            "resets": case((went_down, api_figures.c.resets + 1), else_=api_figures.c.resets),
        },
        where=api_figures.c.sampled_at <= incoming.sampled_at,
    )
    await conn.execute(statement, rows)


async def figures_of(
    conn: AsyncConnection, project: str, name: str, clusters: Iterable[str] | None
) -> list[ApiFigureRecord]:
    """The figures every cluster (or each of `clusters`) last reported of one API."""
    statement = select(*(api_figures.c[f] for f in _FIGURE_FIELDS)).where(
        api_figures.c.project == project, api_figures.c.name == name
    )
    if clusters is not None:
        statement = statement.where(api_figures.c.cluster.in_(list(clusters)))
    return [ApiFigureRecord(**row._mapping) for row in await conn.execute(statement.order_by(api_figures.c.cluster))]


_FIGURE_FIELDS = tuple(f.name for f in fields(ApiFigureRecord))


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


CONTENT_OPS = frozenset({"create", "update", "delete"})
"""The changes history and audit keep: status writes are the system's account of an object, not a version."""


def history_and_audit_rows(
    written: Iterable[tuple[Change, Actor]], at: datetime
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A history row (the version) and an audit row (who, from where) per change of content, at its revision."""
    versions: list[dict[str, Any]] = []
    entries: list[dict[str, Any]] = []
    for change, actor in written:
        if change.op not in CONTENT_OPS:
            continue
        obj = change.obj
        key = {"kind": obj.kind, "project": obj.project, "name": obj.name, "revision": obj.revision}
        versions.append(
            {
                **key,
                "op": change.op,
                "uid": obj.uid,
                "generation": obj.generation,
                "origin": obj.origin,
                "labels": obj.labels,
                "annotations": obj.annotations,
                "spec": obj.spec,
                "deleted": obj.deleted,
                "created_at": obj.created_at,
                "at": at,
                "who": actor.who,
            }
        )
        entries.append(
            {
                **key,
                "at": at,
                "who": actor.who,
                "address": actor.address,
                "request_id": actor.request_id,
                "trace_id": actor.trace_id,
                "operation": change.op,
                "generation": obj.generation,
            }
        )
    return versions, entries


async def append_history_and_audit(
    conn: AsyncConnection, written: Iterable[tuple[Change, Actor]], at: datetime
) -> None:
    versions, entries = history_and_audit_rows(written, at)
    if versions:
        await conn.execute(insert(history), versions)
        await conn.execute(insert(audit), entries)


def _history_entry(row: Any) -> HistoryEntry:
    obj = StoredObject(
        kind=row.kind,
        project=row.project,
        name=row.name,
        uid=row.uid,
        revision=row.revision,
        generation=row.generation,
        origin=row.origin,
        labels=row.labels,
        annotations=row.annotations,
        spec=row.spec,
        status={},
        created_at=row.created_at,
        updated_at=row.at,
        deleted=row.deleted,
    )
    return HistoryEntry(row.revision, row.op, row.generation, row.at, row.who, obj)


def _of_object(kind: str, project: str, name: str) -> Any:
    return and_(history.c.kind == kind, history.c.project == project, history.c.name == name)


async def load_history(
    conn: AsyncConnection,
    kind: str,
    project: str,
    name: str,
    limit: int | None,
    revision: int | None = None,
    up_to: int | None = None,
) -> list[HistoryEntry]:
    """The kept versions of one object, newest first; only the one of `revision` when given, only those at or
    before `up_to` when given."""
    statement = select(history).where(_of_object(kind, project, name))
    if revision is not None:
        statement = statement.where(history.c.revision == revision)
    if up_to is not None:
        statement = statement.where(history.c.revision <= up_to)
    statement = statement.order_by(history.c.revision.desc()).limit(limit)
    return [_history_entry(row) for row in await conn.execute(statement)]


async def load_audit(
    conn: AsyncConnection,
    *,
    since: datetime | None,
    project: str | None,
    kind: str | None,
    who: str | None,
    limit: int,
    before: int | None,
    name: str | None = None,
) -> list[AuditEntry]:
    """Audit entries newest first, matching every filter given; `before`: only revisions below it (paging)."""
    statement = select(audit)
    filters = ((audit.c.project, project), (audit.c.kind, kind), (audit.c.who, who), (audit.c.name, name))
    for column, value in filters:
        if value is not None:
            statement = statement.where(column == value)
    if since is not None:
        statement = statement.where(audit.c.at >= since)
    if before is not None:
        statement = statement.where(audit.c.revision < before)
    statement = statement.order_by(audit.c.revision.desc()).limit(limit)
    return [AuditEntry(**row._mapping) for row in await conn.execute(statement)]


async def prune_history(conn: AsyncConnection, keep: int) -> int:
    """Drop all but the newest `keep` versions of each object; the number of rows removed."""
    rank = func.row_number().over(
        partition_by=(history.c.kind, history.c.project, history.c.name), order_by=history.c.revision.desc()
    )
    key = tuple_(history.c.kind, history.c.project, history.c.name, history.c.revision)
    ranked = select(*key.clauses, rank.label("rank")).subquery()
    doomed = select(ranked.c.kind, ranked.c.project, ranked.c.name, ranked.c.revision).where(ranked.c.rank > keep)
    return (await conn.execute(delete(history).where(key.in_(doomed)))).rowcount


async def prune_audit(conn: AsyncConnection, before: datetime) -> int:
    return (await conn.execute(delete(audit).where(audit.c.at < before))).rowcount
