"""Object writes decided together, in memory, before one transaction commits them all (group commit).

Concurrent writers each hand the store a decision: a plain function that reads the objects it names as the
writes before it in the group left them, and records what it changes. The store loads every named row once,
under the writer slot, runs the decisions in arrival order, and commits the rows, events and revisions they
recorded in one transaction. A decision that raises takes back only its own changes.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Generic, TypeVar
from uuid import uuid4

from meshplane.model.stored import ObjectKey, StoredObject

_R = TypeVar("_R")


@dataclass(frozen=True, slots=True)
class Change:
    """One recorded change: the object as it now is, the event op, and what it replaced (to take it back)."""

    obj: StoredObject
    op: str
    trace_context: dict[str, Any] | None
    before: StoredObject | None


@dataclass(frozen=True, slots=True)
class Fence:
    """What a write's checks against other objects read: everything committed up to `revision`. The write is
    refused if a live object of `kinds` written since then `collides` with it (the checks never saw it)."""

    revision: int
    kinds: frozenset[str]
    collides: Callable[[StoredObject], bool]


def joined(*fences: Fence | None) -> Fence | None:
    """One fence holding what each of `fences` holds: an object collides with it if it was written after the
    revision of a fence of its kind and collides with that fence."""
    present = [fence for fence in fences if fence is not None]
    if len(present) < 2:
        return present[0] if present else None

    def collides(other: StoredObject) -> bool:
        return any(
            other.revision > fence.revision and other.kind in fence.kinds and fence.collides(other) for fence in present
        )

    return Fence(min(f.revision for f in present), frozenset().union(*(f.kinds for f in present)), collides)


@dataclass(frozen=True, slots=True)
class Companion:
    """Changes to other objects that commit with a write, ahead of it in revision order: a reader of the event log
    meets them first (a rollout that governs a change is read before the change it holds back)."""

    keys: tuple[ObjectKey, ...]
    """The objects `record` reads and writes: loaded with the write's own."""
    record: Callable[[WriteBatch, StoredObject | None], None]
    """Records its changes, given the object as it stands before the write (None: there is none); runs only
    when the write changes something."""


class WriteBatch:
    """The named objects as the decisions so far left them, and every change they recorded, in order."""

    def __init__(
        self, revision: int, now: datetime, rows: Iterable[StoredObject], newer: Iterable[StoredObject] = ()
    ) -> None:
        self.revision = revision
        """The last revision taken: the database's before any change, then the newest change's."""
        self.now = now
        self._current: dict[ObjectKey, StoredObject | None] = {row.key: row for row in rows}
        self._stored = frozenset(self._current)
        self._newer = list(newer)
        """Committed rows loaded for the group's fences (see Fence); `written_since` picks what each needs."""
        self.changes: list[Change] = []

    def current(self, kind: str, project: str, name: str) -> StoredObject | None:
        """The row, tombstone or not, as the decisions before this one left it."""
        return self._current.get((kind, project, name))

    def written_since(self, revision: int, kinds: Collection[str]) -> list[StoredObject]:
        """Objects of `kinds` written after `revision`, committed or by this group, as they now stand."""
        latest = {o.key: o for o in self._newer if o.revision > revision and o.kind in kinds}
        latest.update((c.obj.key, c.obj) for c in self.changes if c.obj.kind in kinds)
        return list(latest.values())

    def born(
        self, kind: str, project: str, name: str, spec: dict, labels: dict, annotations: dict, origin: str | None
    ) -> StoredObject:
        """A new object at the next revision: new uid, generation 1."""
        return StoredObject(
            kind=kind,
            project=project,
            name=name,
            uid=str(uuid4()),
            revision=self.revision + 1,
            generation=1,
            origin=origin,
            labels=labels,
            annotations=annotations,
            spec=spec,
            status={},
            created_at=self.now,
            updated_at=self.now,
            deleted=False,
        )

    def changed_from(self, obj: StoredObject, **fields: Any) -> StoredObject:
        """`obj` with `fields` replaced, at the next revision."""
        return replace(obj, revision=self.revision + 1, updated_at=self.now, **fields)

    def record(self, obj: StoredObject, op: str, trace_context: dict[str, Any] | None = None) -> StoredObject:
        """Keep a change made by `born` or `changed_from`; it takes the next revision."""
        if obj.revision != self.revision + 1:
            raise ValueError(f"a change must take revision {self.revision + 1}, not {obj.revision}")
        key = obj.key
        self.changes.append(Change(obj, op, trace_context, self._current.get(key)))
        self._current[key] = obj
        self.revision = obj.revision
        return obj

    def decide(self, decision: Callable[[WriteBatch], _R]) -> Decided[_R]:
        """Run one writer's decision; if it raises, its own changes are taken back and the error kept."""
        mark, revision = len(self.changes), self.revision
        try:
            return Decided(decision(self), None, self.changes[mark:])
        except Exception as exc:
            for change in reversed(self.changes[mark:]):
                self._current[change.obj.key] = change.before
            del self.changes[mark:]
            self.revision = revision
            return Decided(None, exc, [])

    def rows(self) -> tuple[list[StoredObject], list[StoredObject]]:
        """The final state of every changed object: (rows to insert, rows to replace)."""
        final = {change.obj.key: change.obj for change in self.changes}
        fresh = [obj for key, obj in final.items() if key not in self._stored]
        existing = [obj for key, obj in final.items() if key in self._stored]
        return fresh, existing


@dataclass(frozen=True, slots=True)
class Decided(Generic[_R]):
    """What one decision came to: its result or its error, and the changes it recorded."""

    result: _R | None
    error: Exception | None
    changes: list[Change]
