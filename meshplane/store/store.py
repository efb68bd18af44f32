"""The store: objects and their event log, written so that revisions commit in order.

Every write transaction first takes the database's single writer slot (the `meta` row lock on PostgreSQL,
BEGIN IMMEDIATE on SQLite) and holds it until it commits the object rows, their events and the revisions they
took together. Revisions therefore become visible in order, and a consumer tailing `events` by revision never
skips one. Object writes that arrive while one transaction runs wait and share the next (see `batch`): the
slot is held once per group rather than once per write.
"""

from __future__ import annotations

import asyncio
import builtins
import collections
import contextlib
import functools
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Generic, ParamSpec, Protocol, TypeVar, cast

import asyncpg
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from meshplane.audit import SYSTEM, Actor, current_actor
from meshplane.lifecycle import wait_at_most
from meshplane.model.stored import ObjectKey, StoredObject
from meshplane.observability.metrics import STORE_LATENCY
from meshplane.observability.tracing import tracer
from meshplane.store import migrate, pg_commit, queries, sqlite_commit
from meshplane.store.batch import Change, Companion, Decided, Fence, WriteBatch
from meshplane.store.engine import Engines, create_engines
from meshplane.store.errors import AlreadyExists, Compacted, Conflict, NotFound, Overtaken, OwnedElsewhere
from meshplane.store.records import ApiFigureRecord, AuditEntry, Delivery, Event, HistoryEntry, TokenRecord

Within = ObjectKey | tuple[ObjectKey, ...] | None
"""What must be live when a write commits: one object's key, or several."""

NOTIFY_CHANNEL = "meshplane_events"
_LIST_BATCH = 500
_POLL_INTERVAL = 0.5
_GROUP_LIMIT = 256
"""Writes committed together at most: a bound on one transaction's size and on the wait of the last in it."""
_UNLOCKED_ATTEMPTS = 3
"""Times a group is read and decided again on PostgreSQL when other writers keep committing first, before it
takes the writer slot instead (see `pg_commit`)."""
_HELD_CHANGES = 4096
"""Changes of this instance's newest commits kept in memory for `held_changes`, at most (whole commits)."""


def _plain(value: dict[str, Any]) -> dict[str, Any]:
    """The value as it will read back from a JSON column, so that "unchanged" compares like with like."""
    return json.loads(json.dumps(value, allow_nan=False))


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _timed(operation: Callable[_P, Awaitable[_R]]) -> Callable[_P, Awaitable[_R]]:
    """Time a store operation under its own name: its transaction, and any wait for the writer slot."""
    histogram = STORE_LATENCY.labels(operation.__name__)

    @functools.wraps(operation)
    async def timed(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        started = time.perf_counter()
        try:
            return await operation(*args, **kwargs)
        finally:
            histogram.observe(time.perf_counter() - started)

    return timed


@dataclass(frozen=True, slots=True)
class _Expected:
    """A writer's precondition: the revision it `read`, and the object revision that holds the same content
    (the newer one when only status was written since)."""

    read: int
    accepted: int


@dataclass(frozen=True, slots=True)
class _Commit:
    """One transaction this instance committed, as readers of the event log's content need it: every event, and
    the objects its changes of content left (deleted ones included), without their status, which those
    readers never look at and which can list a whole fleet."""

    events: builtins.list[Event]
    objects: dict[ObjectKey, StoredObject]

    @classmethod
    def of(cls, at: datetime, changes: Iterable[Change]) -> _Commit:
        events, objects = [], {}
        for c in changes:
            obj = c.obj
            events.append(Event(obj.revision, c.op, obj.kind, obj.project, obj.name, c.trace_context, at))
            if c.op != "status":
                objects[obj.key] = replace(obj, status={})
        return cls(events, objects)

    @property
    def first(self) -> int:
        return self.events[0].revision

    @property
    def last(self) -> int:
        return self.events[-1].revision


@dataclass(frozen=True, slots=True)
class _Report:
    """One cluster report waiting to be written, and the caller waiting for its outcome."""

    deliveries: builtins.list[Delivery]
    key: str | None
    done: asyncio.Future[bool]
    figures: builtins.list[ApiFigureRecord]


@dataclass(frozen=True, slots=True)
class _Pending(Generic[_R]):
    """One writer's decision waiting for its group's transaction, and the writer waiting for what it came to."""

    keys: builtins.list[ObjectKey]
    decision: Callable[[WriteBatch], _R]
    done: asyncio.Future[Decided[_R]]
    fence: Fence | None
    actor: Actor
    """Whom the writer acted for, read in its own task: history and audit keep it with each change."""


_Group = builtins.list[_Pending[Any]]
"""Writers committed together (see `_commit_group`)."""
_Decisions = tuple[WriteBatch, builtins.list[Decided[Any]]]
"""A group's batch and what each of its decisions came to."""


class Store:
    """Objects as JSON documents keyed by (kind, project, name), with a gap-free event log of their changes."""

    def __init__(self, engines: Engines) -> None:
        self._engines = engines
        # In-process writers queue here rather than in SQLite's busy handler, which sleeps in coarse steps.
        self._write_lock: contextlib.AbstractAsyncContextManager[Any] = (
            asyncio.Lock() if engines.dialect == "sqlite" else contextlib.nullcontext()
        )
        self._written = asyncio.Event()
        self._committed = 0
        """The newest revision this instance committed."""
        self._notified = 0
        """The newest revision another writer announced it committed (PostgreSQL's NOTIFY)."""
        self._commit_connection = pg_commit.CommitConnection(self.driver_dsn)
        database = engines.base.url.database or ""
        self._sqlite = sqlite_commit.SqliteCommits(database) if engines.dialect == "sqlite" else None
        """SQLite's group commits (see `sqlite_commit`); None on PostgreSQL."""
        self._writer_id = uuid.uuid4().hex
        """Names this instance's NOTIFYs, so that it knows them for its own."""
        self._held: collections.deque[_Commit] = collections.deque()
        """This instance's newest commits, oldest first (see `held_changes`)."""
        self._held_count = 0
        self._reports: builtins.list[_Report] = []
        self._pending: _Group = []
        self._committing: asyncio.Task[None] | None = None
        self._reporting: asyncio.Task[None] | None = None
        self._listener: Any = None

    @property
    def driver_dsn(self) -> str:
        """The database URL as asyncpg itself takes it (for LISTEN, advisory-lock and group-commit connections)."""
        return self._engines.base.url.set(drivername="postgresql").render_as_string(hide_password=False)

    async def _listen(self) -> None:
        """On PostgreSQL, wake waiters when any replica commits (NOTIFY); polling stays as the fallback."""
        if self.dialect != "postgresql" or (self._listener is not None and not self._listener.is_closed()):
            return
        try:
            self._listener = await asyncpg.connect(self.driver_dsn)
            await self._listener.add_listener(NOTIFY_CHANNEL, self._notify)
        except (OSError, asyncpg.PostgresError):
            self._listener = None

    def _notify(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        """A commit announced by a writer on the database: its payload is its revision and the writer's id. This
        instance's own are skipped: it knows them when they commit, and the NOTIFY can come before that."""
        revision, _, writer = payload.partition(" ")
        if writer != self._writer_id:
            self._notified = max(self._notified, int(revision))
            self._wake()

    def _wake(self) -> None:
        self._written.set()
        self._written = asyncio.Event()

    @classmethod
    async def open(cls, url: str) -> Store:
        """Connect and bring the schema to head; a SQLite file's directory is created if missing."""
        engines = create_engines(url)
        try:
            await migrate.upgrade(engines)
        except BaseException:
            await engines.base.dispose()
            raise
        return cls(engines)

    async def close(self) -> None:
        for task in (self._committing, self._reporting):
            if task is not None:
                with contextlib.suppress(Exception):
                    await task
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await self._listener.close()
        await self._commit_connection.close()
        if self._sqlite is not None:
            await self._sqlite.close()
        await self._engines.base.dispose()

    @property
    def committed(self) -> int:
        """The newest revision this instance has committed (0 before its first write)."""
        return self._committed

    @property
    def dialect(self) -> str:
        return self._engines.dialect

    # -- writes --------------------------------------------------------------------------------------------

    @_timed
    async def create(
        self,
        kind: str,
        project: str,
        name: str,
        *,
        spec: dict,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        origin: str | None = None,
        trace_context: dict | None = None,
        within: Within = None,
        fence: Fence | None = None,
        companion: Companion | None = None,
    ) -> StoredObject:
        """A new object; a tombstone under the same name is revived as a new object (new uid, generation 1).
        `within`: an object (or several) that must be live when the write commits (NotFound of the first one
        that is not otherwise), such as the project the new object belongs to. `fence`: Overtaken if an
        object it names was written since the caller's checks (see Fence). `companion`: changes to commit with
        it, ahead of it (see Companion)."""
        spec, labels, annotations = _plain(spec), _plain(labels or {}), _plain(annotations or {})

        def decide(batch: WriteBatch) -> StoredObject:
            _require(batch, within)
            _hold_fence(batch, fence, (kind, project, name))
            current = batch.current(kind, project, name)
            if current is not None and not current.deleted:
                raise AlreadyExists(kind, project, name)
            if companion is not None:
                companion.record(batch, current)
            obj = batch.born(kind, project, name, spec, labels, annotations, origin)
            return batch.record(obj, "create", trace_context)

        return await self._write_object(kind, project, name, decide, within, fence, companion)

    @_timed
    async def put(
        self,
        kind: str,
        project: str,
        name: str,
        *,
        spec: dict,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        origin: str | None = None,
        take_over: bool = False,
        expected_revision: int | None = None,
        trace_context: dict | None = None,
        within: Within = None,
        fence: Fence | None = None,
        companion: Companion | None = None,
    ) -> tuple[StoredObject, bool]:
        """Create or replace; (object, created). Unchanged content is a no-op: no revision, no event. An object
        of another `origin` is replaced only when told to `take_over` (OwnedElsewhere otherwise). `within`,
        `fence` and `companion`: as for `create`."""
        spec, labels, annotations = _plain(spec), _plain(labels or {}), _plain(annotations or {})

        def decide(expected: _Expected | None, batch: WriteBatch) -> tuple[StoredObject, bool]:
            _require(batch, within)
            _hold_fence(batch, fence, (kind, project, name))
            current = batch.current(kind, project, name)
            if current is None or current.deleted:
                if expected is not None:
                    raise NotFound(kind, project, name)
                if companion is not None:
                    companion.record(batch, current)
                obj = batch.born(kind, project, name, spec, labels, annotations, origin)
                return batch.record(obj, "create", trace_context), True
            _check_expected(current, expected)
            if current.origin != origin and not take_over:
                raise OwnedElsewhere(kind, project, name, owner=current.origin)
            unchanged = (current.spec, current.labels, current.annotations, current.origin)
            if (spec, labels, annotations, origin) == unchanged:
                return current, False
            if companion is not None:
                companion.record(batch, current)
            obj = batch.changed_from(
                current,
                spec=spec,
                labels=labels,
                annotations=annotations,
                origin=origin,
                generation=current.generation + (spec != current.spec),
            )
            return batch.record(obj, "update", trace_context), False

        return await self._expecting(
            (kind, project, name),
            expected_revision,
            lambda expected: self._write_object(
                kind, project, name, functools.partial(decide, expected), within, fence, companion
            ),
        )

    @_timed
    async def delete(
        self,
        kind: str,
        project: str,
        name: str,
        *,
        expected_revision: int | None = None,
        trace_context: dict | None = None,
        fence: Fence | None = None,
    ) -> StoredObject:
        """Tombstone the object: it stays a row, so the delete has a revision, until compaction purges it.
        `fence`: as for `create`."""

        def decide(expected: _Expected | None, batch: WriteBatch) -> StoredObject:
            _hold_fence(batch, fence, (kind, project, name))
            current = _live(batch.current(kind, project, name), kind, project, name)
            _check_expected(current, expected)
            return batch.record(batch.changed_from(current, deleted=True), "delete", trace_context)

        return await self._expecting(
            (kind, project, name),
            expected_revision,
            lambda expected: self._write_object(kind, project, name, functools.partial(decide, expected), fence=fence),
        )

    @_timed
    async def transact(self, keys: builtins.list[ObjectKey], decision: Callable[[WriteBatch], _R]) -> _R:
        """Run `decision` on the objects named by `keys` and commit what it records, in the order it records it:
        for writes of several objects whose order readers depend on (see `server.rollouts`)."""
        result, _ = await self._write(keys, decision)
        return result

    @_timed
    async def set_status(self, kind: str, project: str, name: str, status: dict) -> StoredObject:
        """Replace the status under its own event op, so consumers of spec can skip status-only changes."""
        status = _plain(status)

        def decide(batch: WriteBatch) -> StoredObject:
            current = _live(batch.current(kind, project, name), kind, project, name)
            return _record_status(batch, current, status)

        result, _ = await self._write([(kind, project, name)], decide)
        return result

    @_timed
    async def merge_status(self, kind: str, project: str, name: str, fields: dict) -> StoredObject:
        """Set some status fields, keeping the others, atomically: writers of different fields (presence,
        roll-up, reports) never undo each other."""
        fields = _plain(fields)

        def decide(batch: WriteBatch) -> StoredObject:
            current = _live(batch.current(kind, project, name), kind, project, name)
            return _record_status(batch, current, {**current.status, **fields})

        result, _ = await self._write([(kind, project, name)], decide)
        return result

    @_timed
    async def merge_statuses(self, kind: str, project: str, changes: Mapping[str, dict]) -> int:
        """`merge_status` of many objects of one kind and project (name -> fields) in one transaction, each
        change under its own revision; names that are not there are skipped. How many statuses changed."""
        fields = {name: _plain(value) for name, value in changes.items()}

        def decide(batch: WriteBatch) -> int:
            updated = 0
            for name in sorted(fields):
                current = batch.current(kind, project, name)
                if current is not None and not current.deleted:
                    updated += _record_status(batch, current, {**current.status, **fields[name]}) is not current
            return updated

        updated, _ = await self._write([(kind, project, name) for name in fields], decide)
        return updated

    @_timed
    async def compact(self, keep_after: int) -> int:
        """Forget events and tombstones at or below `keep_after` (capped at the current revision)."""
        async with self._exclusive() as conn:
            revision, floor = await queries.read_meta(conn, lock=True)
            floor = max(floor, min(keep_after, revision))
            removed = await queries.purge(conn, floor)
            await queries.set_floor(conn, floor)
            await conn.commit()
        return removed

    @_timed
    async def prune_history(self, keep: int, audit_before: datetime) -> int:
        """Keep the newest `keep` versions of each object (0: all of them) and the audit entries from
        `audit_before` on; the number of rows removed. An object's newest version is always kept."""
        async with self._exclusive() as conn:
            removed = await queries.prune_history(conn, keep) if keep > 0 else 0
            removed += await queries.prune_audit(conn, audit_before)
            await conn.commit()
        return removed

    @_timed
    async def record_deliveries(self, deliveries: Iterable[Delivery], idempotency_key: str | None = None) -> bool:
        """Keep what clusters reported, in one transaction with its idempotency key.

        False when the key was seen before: a retried report is applied once. Deliveries are not
        objects and take no revision: status roll-up folds them into objects' status. Reports arriving
        together (a thousand agents answering one change) are written together, in one transaction.
        """
        return await self._queue_report(list(deliveries), idempotency_key)

    @_timed
    async def record_figures(self, cluster: str, figures: Iterable[ApiFigureRecord]) -> None:
        """Keep a cluster's newest per-API figures (see `ApiFigureRecord`), written with the reports arriving
        together with them in one transaction. ValueError for a figure of another cluster."""
        reported = list(figures)
        if any(figure.cluster != cluster for figure in reported):
            raise ValueError(f"figures of another cluster in a report of cluster {cluster!r}")
        await self._queue_report([], None, reported)

    @_timed
    async def figures_of(
        self, project: str, name: str, clusters: Iterable[str] | None = None
    ) -> dict[str, ApiFigureRecord]:
        """The figures each cluster (every one, or those of `clusters`) last reported of an API, by cluster."""
        async with self._reading() as conn:
            found = await queries.figures_of(conn, project, name, clusters)
        return {figure.cluster: figure for figure in found}

    async def _queue_report(
        self,
        deliveries: builtins.list[Delivery],
        key: str | None,
        figures: builtins.list[ApiFigureRecord] | None = None,
    ) -> bool:
        """Until the report is written with those waiting beside it; False when its key was seen before."""
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._reports.append(_Report(deliveries, key, done, figures or []))
        if self._reporting is None or self._reporting.done():
            self._reporting = asyncio.create_task(self._write_reports(), name="store-reports")
        return await asyncio.shield(done)

    async def _write_reports(self) -> None:
        while self._reports:
            batch, self._reports = self._reports, []
            await _together_or_alone(batch, self._write_report_batch)

    async def _write_report_batch(self, batch: builtins.list[_Report]) -> None:
        now = datetime.now(UTC)
        async with self._exclusive() as conn:
            fresh = await queries.claim_keys(conn, (r.key for r in batch if r.key is not None), now)
            accepted = []
            for report in batch:
                first = report.key is None or report.key in fresh
                if report.key is not None:
                    fresh.discard(report.key)  # a key twice in one batch: its first report only
                accepted.append((report, first))
            await queries.upsert_deliveries(conn, (d for report, first in accepted if first for d in report.deliveries))
            await queries.upsert_figures(conn, (f for report, first in accepted if first for f in report.figures), now)
            await conn.commit()
        for report, first in accepted:
            if not report.done.done():
                report.done.set_result(first)

    @_timed
    async def claim_idempotency_key(self, key: str) -> bool:
        """Record a key on its own, for reports whose effects are ordinary (revisioned) writes."""
        async with self._exclusive() as conn:
            claimed = await queries.claim_keys(conn, [key], datetime.now(UTC))
            await conn.commit()
        return key in claimed

    @_timed
    async def forget_idempotency_keys(self, before: datetime) -> int:
        async with self._exclusive() as conn:
            removed = await queries.forget_keys(conn, before)
            await conn.commit()
        return removed

    @_timed
    async def forget_deliveries(self, kind: str, project: str, name: str) -> None:
        """Drop every cluster's delivery record of an object that is gone."""
        async with self._exclusive() as conn:
            await queries.drop_deliveries(conn, kind, project, name)
            await conn.commit()

    @_timed
    async def add_token(self, token: TokenRecord) -> None:
        async with self._exclusive() as conn:
            await queries.insert_token(conn, token)
            await conn.commit()

    @_timed
    async def revoke_token(self, token_id: str) -> bool:
        async with self._exclusive() as conn:
            found = await queries.revoke_token(conn, token_id)
            await conn.commit()
        return found > 0

    @_timed
    async def server_key(self, name: str, make: Callable[[], bytes]) -> bytes:
        """The key every replica shares under `name`: the first to ask stores `make()`, the others read it."""
        async with self._reading() as conn:
            found = await queries.load_server_key(conn, name)
        if found is not None:
            return found
        key = make()
        try:
            async with self._exclusive() as conn:
                await queries.insert_server_key(conn, name, key, datetime.now(UTC))
                await conn.commit()
        except IntegrityError:  # another replica stored one first: that one holds
            async with self._reading() as conn:
                found = await queries.load_server_key(conn, name)
            assert found is not None
            return found
        return key

    # -- reads ---------------------------------------------------------------------------------------------

    @_timed
    async def token(self, token_id: str) -> TokenRecord | None:
        async with self._reading() as conn:
            found = await queries.load_tokens(conn, token_id)
        return found[0] if found else None

    @_timed
    async def tokens(self) -> builtins.list[TokenRecord]:
        async with self._reading() as conn:
            return await queries.load_tokens(conn)

    @_timed
    async def deliveries_changed(self, since: datetime | None = None) -> builtins.list[Delivery]:
        async with self._reading() as conn:
            return await queries.deliveries_changed(conn, since)

    @_timed
    async def delivered_objects(self) -> tuple[set[tuple[str, str, str]], datetime | None]:
        """The objects some cluster reported, by (kind, project, name), and when the newest report came."""
        async with self._reading() as conn:
            return await queries.delivered_objects(conn)

    @_timed
    async def deliveries_of(self, keys: Iterable[tuple[str, str, str]]) -> builtins.list[Delivery]:
        async with self._reading() as conn:
            return await queries.deliveries_of(conn, keys)

    @_timed
    async def get(self, kind: str, project: str, name: str) -> StoredObject:
        async with self._reading() as conn:
            return _live(await queries.load(conn, kind, project, name), kind, project, name)

    @_timed
    async def get_many(self, keys: Iterable[tuple[str, str, str]]) -> dict[tuple[str, str, str], StoredObject]:
        """The live objects among `keys` ((kind, project, name)), read in one transaction."""
        async with self._reading() as conn:
            return _live_by_key(await queries.load_many(conn, keys))

    @_timed
    async def list(
        self,
        kind: str,
        project: str | None = None,
        *,
        where: Callable[[StoredObject], bool] | None = None,
        limit: int | None = None,
        after: tuple[str, str] | None = None,
    ) -> tuple[builtins.list[StoredObject], int]:
        """Live objects by (project, name) after `after`, filtered by `where`, at most `limit`; and the revision.

        Rows are fetched in batches inside one read transaction, so a selective `where` still fills `limit`
        and the revision returned is the one the items are consistent at.
        """
        if limit is not None and limit < 0:
            raise ValueError(f"limit must not be negative, got {limit}")
        items: builtins.list[StoredObject] = []
        async with self._reading() as conn:
            revision, _ = await queries.read_meta(conn)
            while limit is None or len(items) < limit:
                size = _LIST_BATCH if where is not None or limit is None else limit - len(items)
                batch = await queries.live_objects(conn, [kind], project=project, after=after, limit=size)
                items.extend(obj for obj in batch if where is None or where(obj))
                if len(batch) < size:
                    break
                after = (batch[-1].project, batch[-1].name)
        return items[:limit], revision

    @_timed
    async def snapshot(self, kinds: Iterable[str]) -> tuple[int, builtins.list[StoredObject]]:
        """Every live object of `kinds` and the revision they are consistent at; tail events after it."""
        async with self._reading() as conn:
            revision, _ = await queries.read_meta(conn)
            return revision, await queries.live_objects(conn, kinds)

    @_timed
    async def latest_trace_contexts(
        self, kinds: Iterable[str], up_to: int
    ) -> dict[tuple[str, str, str], dict[str, Any]]:
        """Trace contexts of the changes that made the objects of a snapshot at `up_to` what they are (where
        those changes were traced and are not compacted yet): their pushes still join the writes' traces."""
        async with self._reading() as conn:
            return await queries.latest_trace_contexts(conn, kinds, up_to)

    @_timed
    async def changes_since(
        self, revision: int, limit: int = 1000, *, status_changes: bool = True
    ) -> tuple[builtins.list[Event], dict[tuple[str, str, str], StoredObject]]:
        """Events after `revision`, oldest first (Compacted when some of them are already gone), and from the
        same snapshot the live objects they name (a deleted one is absent): a tail's re-reads in one
        transaction instead of one per object. Without `status_changes`, objects named only by status
        events are not read (a reader of specs skips those events)."""
        async with self._reading() as conn:
            _, floor = await queries.read_meta(conn)
            if revision < floor:
                raise Compacted(revision, floor)
            events = await queries.events_after(conn, revision, limit)
            wanted = {(e.kind, e.project, e.name) for e in events if status_changes or e.op != "status"}
            named = await queries.load_many(conn, wanted)
        return events, _live_by_key(named)

    def held_changes(
        self, revision: int
    ) -> tuple[builtins.list[Event], dict[tuple[str, str, str], StoredObject]] | None:
        """What `changes_since(revision, status_changes=False)` reads, status aside, without reading it, when
        this instance committed the changes right after `revision` itself and still holds them: their events
        and the live objects they changed the content of, as the last of those commits left them. It stops
        before a revision another writer took; None when that is the very next one, or the changes are no
        longer held: the caller reads the store. The commits up to `revision` are let go: the caller has them."""
        while self._held and self._held[0].last <= revision:
            self._held_count -= len(self._held.popleft().events)
        expected, taken = revision + 1, []
        for commit in self._held:
            if commit.first != expected:
                break
            taken.append(commit)
            expected = commit.last + 1
        if not taken:
            return None
        events = [event for commit in taken for event in commit.events]
        latest = {key: obj for commit in taken for key, obj in commit.objects.items()}
        return events, _live_by_key(latest.values())

    def _hold(self, commit: _Commit) -> None:
        self._held.append(commit)
        self._held_count += len(commit.events)
        while self._held_count > _HELD_CHANGES and len(self._held) > 1:
            self._held_count -= len(self._held.popleft().events)

    @_timed
    async def history(
        self, kind: str, project: str, name: str, *, limit: int | None = None
    ) -> builtins.list[HistoryEntry]:
        """The kept versions of an object, newest first, those of a deleted object included."""
        async with self._reading() as conn:
            return await queries.load_history(conn, kind, project, name, limit)

    @_timed
    async def content_revision(self, kind: str, project: str, name: str) -> tuple[int, int] | None:
        """The live object's revision and that of the last change of its content (spec, labels, annotations,
        origin), read together: they differ when the system wrote status since. None when it does not exist."""
        async with self._reading() as conn:
            current = await queries.load(conn, kind, project, name)
            if current is None or current.deleted:
                return None
            kept = await queries.load_history(conn, kind, project, name, 1)
        return current.revision, kept[0].revision if kept else current.revision

    async def _expecting(
        self, key: ObjectKey, read: int | None, attempt: Callable[[_Expected | None], Awaitable[_R]]
    ) -> _R:
        """Run a write expecting the object at revision `read` (None: at any); when it conflicts only because
        the system wrote status since, once more accepting the revision now, since the spec, labels and
        annotations the writer saw are still the current ones."""
        if read is None:
            return await attempt(None)
        try:
            return await attempt(_Expected(read, read))
        except Conflict:
            found = await self.content_revision(*key)
            if found is None or not found[1] <= read <= found[0]:
                raise
            return await attempt(_Expected(read, found[0]))

    @_timed
    async def version_at(self, kind: str, project: str, name: str, revision: int) -> StoredObject | None:
        """The object as the change at `revision` wrote it; None when no kept version of it has that revision."""
        async with self._reading() as conn:
            found = await queries.load_history(conn, kind, project, name, 1, revision)
        return found[0].obj if found else None

    @_timed
    async def version_in_force(self, kind: str, project: str, name: str, revision: int) -> StoredObject | None:
        """The object as it stood at `revision` (the newest kept version at or before it, whatever status writes
        came after); None when it did not exist then or that version is no longer kept."""
        async with self._reading() as conn:
            found = await queries.load_history(conn, kind, project, name, 1, up_to=revision)
        return found[0].obj if found and not found[0].obj.deleted else None

    @_timed
    async def audit(
        self,
        *,
        since: datetime | None = None,
        project: str | None = None,
        kind: str | None = None,
        who: str | None = None,
        limit: int = 100,
        after: int | None = None,
        name: str | None = None,
    ) -> builtins.list[AuditEntry]:
        """Audit entries newest first, matching every filter given; `after`: the revision of the last entry of
        the previous page (the next page holds older ones)."""
        async with self._reading() as conn:
            return await queries.load_audit(
                conn, since=since, project=project, kind=kind, who=who, limit=limit, before=after, name=name
            )

    @_timed
    async def last_revision_before(self, at: datetime) -> int | None:
        async with self._reading() as conn:
            return await queries.last_revision_before(conn, at)

    @_timed
    async def current_revision(self) -> int:
        async with self._reading() as conn:
            revision, _ = await queries.read_meta(conn)
            return revision

    async def wait_for_revision(self, after: int, timeout: float) -> int:  # noqa: ASYNC109 - the API's contract
        """The current revision once it passes `after`, or whatever it is when `timeout` runs out.

        This instance's writes, and on PostgreSQL those of every other (NOTIFY), wake the wait at once and need
        no read to tell; polling, every _POLL_INTERVAL of waiting, catches writes made by other processes on a
        SQLite file.
        """
        await self._listen()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            written = self._written
            known = max(self._committed, self._notified)
            if known > after:
                return known
            remaining = deadline - loop.time()
            if remaining > 0 and await wait_at_most(min(_POLL_INTERVAL, remaining), written.wait()):
                continue
            revision = await self.current_revision()
            if revision > after or remaining <= 0:
                return revision

    # -- transactions --------------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _exclusive(self) -> AsyncIterator[AsyncConnection]:
        """A write transaction, left uncommitted unless the caller commits."""
        async with self._write_lock, self._engines.write.connect() as conn:
            yield conn

    async def _write_object(
        self,
        kind: str,
        project: str,
        name: str,
        decision: Callable[[WriteBatch], _R],
        within: Within = None,
        fence: Fence | None = None,
        companion: Companion | None = None,
    ) -> _R:
        """`_write` of one object's content, in a span (the child of the write that asked for it)."""
        attributes = {"db.system.name": self.dialect, "meshplane.kind": kind, "meshplane.name": name}
        if project:
            attributes["meshplane.project"] = project
        with tracer().start_as_current_span("meshplane.store.transaction", attributes=attributes) as span:
            keys = [(kind, project, name), *_within_keys(within), *(companion.keys if companion else ())]
            result, changes = await self._write(keys, decision, fence)
            span.set_attribute("meshplane.changed", bool(changes))
            if changes:
                span.set_attribute("meshplane.revision", changes[0].obj.revision)
            return result

    async def _write(
        self, keys: builtins.list[ObjectKey], decision: Callable[[WriteBatch], _R], fence: Fence | None = None
    ) -> tuple[_R, builtins.list[Change]]:
        """Run `decision` on the objects named by `keys` (and those `fence` names), in the next group commit;
        what it returned and the changes it recorded, once they are committed (or the error it raised, which
        commits nothing of it)."""
        done: asyncio.Future[Decided[_R]] = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(keys, decision, done, fence, current_actor() or Actor(SYSTEM)))
        if self._committing is None or self._committing.done():
            self._committing = asyncio.create_task(self._commit_pending(), name="store-writes")
        decided = await asyncio.shield(done)
        if decided.error is not None:
            raise decided.error
        return cast(_R, decided.result), decided.changes

    async def _commit_pending(self) -> None:
        """Commit waiting writes group after group: a lone write goes at once, and writes that arrive while a
        group commits share the next transaction."""
        group: _Group = []
        try:
            while self._pending:
                group, self._pending = self._pending[:_GROUP_LIMIT], self._pending[_GROUP_LIMIT:]
                await _together_or_alone(group, self._commit_group)
        except BaseException:
            for pending in [*group, *self._pending]:
                pending.done.cancel()
            self._pending = []
            raise

    async def _commit_group(self, group: _Group) -> None:
        """Run the group's decisions in order on the rows they name, as committed, and commit what they recorded
        with consecutive revisions: on PostgreSQL in two statements when no other writer commits meanwhile
        (see `pg_commit`), else in a transaction holding the writer slot."""
        if self._sqlite is not None:
            self._settle(group, *await self._commit_sqlite(self._sqlite, group))
            return
        for _ in range(_UNLOCKED_ATTEMPTS):
            if (committed := await self._commit_unlocked(group)) is not None:
                self._settle(group, *committed)
                return
        self._settle(group, *await self._commit_locked(group))

    async def _commit_unlocked(self, group: _Group) -> _Decisions | None:
        """The group decided on one snapshot and written if no other writer committed since; None if one did."""
        async with self._commit_connection.held() as driver:
            revision, named, fenced = await pg_commit.read(driver, _named(group), _fence_of(group))
            batch, decided = _decided(group, revision, named, fenced)
            if batch.changes:
                written = _written(group, decided)
                payload = f"{batch.revision} {self._writer_id}"
                if not await pg_commit.write(driver, revision, batch, written, NOTIFY_CHANNEL, payload):
                    return None
        return batch, decided

    async def _commit_sqlite(self, sqlite: sqlite_commit.SqliteCommits, group: _Group) -> _Decisions:
        """The group decided on the rows read under SQLite's write lock and written before it is let go, in two
        trips to the commits' thread (see `sqlite_commit`)."""
        async with self._write_lock:
            try:
                revision, named, fenced = await sqlite.begin(_named(group), _fence_of(group))
                batch, decided = _decided(group, revision, named, fenced)
                if batch.changes:
                    await sqlite.commit(batch, _written(group, decided))
                else:
                    await sqlite.rollback()
            except BaseException:
                sqlite.rollback()  # queued behind the trip under way, if this task is being cancelled
                raise
        return batch, decided

    async def _commit_locked(self, group: _Group) -> _Decisions:
        """On PostgreSQL, one transaction: the named rows read under the writer slot (the `meta` row lock), the
        decisions run, and what they recorded written (rolled back when nothing changed)."""
        async with self._exclusive() as conn:
            revision, _ = await queries.read_meta(conn, lock=True)
            named = await queries.load_many(conn, _named(group))
            fence = _fence_of(group)
            fenced = await queries.fence_rows(conn, *fence) if fence is not None else []
            batch, decided = _decided(group, revision, named, fenced)
            if batch.changes:
                fresh, existing = batch.rows()
                await queries.insert_objects(conn, fresh)
                await queries.rewrite(conn, existing)
                await queries.append_events(conn, batch.changes, batch.now)
                await queries.append_history_and_audit(conn, _written(group, decided), batch.now)
                await queries.next_revision(conn, len(batch.changes))
                # Delivered at commit: other replicas' waits wake without polling.
                await conn.execute(
                    text("SELECT pg_notify(:channel, :payload)"),
                    {"channel": NOTIFY_CHANNEL, "payload": f"{batch.revision} {self._writer_id}"},
                )
                await conn.commit()
        return batch, decided

    def _settle(self, group: _Group, batch: WriteBatch, decided: builtins.list[Decided[Any]]) -> None:
        """Tell each writer what its decision came to, once the group is committed."""
        if batch.changes:
            self._committed = max(self._committed, batch.revision)
            self._hold(_Commit.of(batch.now, batch.changes))
            self._wake()
        for pending, outcome in zip(group, decided, strict=True):
            pending.done.set_result(outcome)

    @contextlib.asynccontextmanager
    async def _reading(self) -> AsyncIterator[AsyncConnection]:
        """A read transaction: one consistent snapshot for every statement in it."""
        async with self._engines.read.connect() as conn:
            yield conn


class _Awaited(Protocol):
    done: asyncio.Future[Any]


_W = TypeVar("_W", bound=_Awaited)


async def _together_or_alone(group: builtins.list[_W], commit: Callable[[builtins.list[_W]], Awaitable[None]]) -> None:
    """Commit a group in one transaction; if the database refuses it, each member alone, so that one bad member
    fails by itself (its waiter gets the error) and the others still commit."""
    try:
        await commit(group)
        return
    except Exception as exc:
        if len(group) == 1:
            _fail(group[0], exc)
            return
    for member in group:
        try:
            await commit([member])
        except Exception as exc:
            _fail(member, exc)


def _fail(member: _Awaited, exc: Exception) -> None:
    if not member.done.done():
        member.done.set_exception(exc)


def _named(group: _Group) -> set[ObjectKey]:
    return {key for pending in group for key in pending.keys}


def _fence_of(group: _Group) -> tuple[int, set[str]] | None:
    """The oldest revision the group's fences were checked at, and their kinds: the rows to read besides."""
    fences = [pending.fence for pending in group if pending.fence is not None]
    if not fences:
        return None
    return min(f.revision for f in fences), {kind for f in fences for kind in f.kinds}


def _decided(
    group: _Group, revision: int, named: builtins.list[StoredObject], fenced: builtins.list[StoredObject]
) -> _Decisions:
    """The group's decisions run in order on the named rows read at `revision`; its fences weigh those and the
    rows written since the fences' revisions (`fenced`)."""
    batch = WriteBatch(revision, datetime.now(UTC), named, [*named, *fenced])
    return batch, [batch.decide(pending.decision) for pending in group]


def _written(group: _Group, decided: builtins.list[Decided[Any]]) -> builtins.list[tuple[Change, Actor]]:
    """Each change with the writer it was made for (history and audit keep it)."""
    return [(c, p.actor) for p, outcome in zip(group, decided, strict=True) for c in outcome.changes]


def _live_by_key(objects: Iterable[StoredObject]) -> dict[tuple[str, str, str], StoredObject]:
    return {o.key: o for o in objects if not o.deleted}


def _live(obj: StoredObject | None, kind: str, project: str, name: str) -> StoredObject:
    """`obj`, the row found under the key, unless there is none or it is a tombstone."""
    if obj is None or obj.deleted:
        raise NotFound(kind, project, name)
    return obj


def _within_keys(within: Within) -> builtins.list[ObjectKey]:
    if not within:
        return []
    if isinstance(within[0], str):
        return [cast(ObjectKey, within)]
    return builtins.list(cast(tuple[ObjectKey, ...], within))


def _require(batch: WriteBatch, within: Within) -> None:
    for key in _within_keys(within):
        _live(batch.current(*key), *key)


def _hold_fence(batch: WriteBatch, fence: Fence | None, key: ObjectKey) -> None:
    if fence is None:
        return
    for obj in batch.written_since(fence.revision, fence.kinds):
        if obj.key != key and not obj.deleted and fence.collides(obj):
            raise Overtaken(*key, by=obj.key, revision=obj.revision)


def _record_status(batch: WriteBatch, current: StoredObject, status: dict[str, Any]) -> StoredObject:
    """A new status under its own revision and status event; `current` itself when it is the same."""
    if status == current.status:
        return current
    return batch.record(batch.changed_from(current, status=status), "status")


def _check_expected(obj: StoredObject, expected: _Expected | None) -> None:
    if expected is not None and expected.accepted != obj.revision:
        raise Conflict(obj.kind, obj.project, obj.name, current=obj.revision, given=expected.read)
