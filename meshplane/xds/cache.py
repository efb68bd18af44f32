"""What each node group should hold, per type URL; streams only read it and wait on it."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import MappingProxyType

from meshplane.xds.resource import VersionedResource

_EMPTY: Mapping[str, VersionedResource] = MappingProxyType({})
# Removed names are remembered so streams can diff in O(changed); past this many beyond the live
# set they are forgotten, and streams that fell behind the forgetting fall back to a full diff.
_TOMBSTONE_SLACK = 1024
# Origin times kept per type: enough for any stream that is keeping up; one further behind times its
# next push from the oldest change still remembered.
_MAX_STAMPS = 64


def _type_version(resources: Mapping[str, VersionedResource]) -> str:
    """SotW version of a whole type: a hash over its sorted name:version pairs."""
    digest = hashlib.sha256()
    for name in sorted(resources):
        digest.update(f"{name}:{resources[name].version}\n".encode())
    return digest.hexdigest()[:16]


class _TypeState:
    """One type of one group, with a change log ordered by generation."""

    __slots__ = ("_sotw_entries", "_version", "floor", "log", "resources", "stamps")

    def __init__(self, generation: int) -> None:
        # Replaced on change, never mutated: streams keep references to what they sent.
        self.resources: dict[str, VersionedResource] = {}
        self._version: str | None = None
        self._sotw_entries: bytes | None = None
        self.log: dict[str, int] = {}
        # Changes at or before this generation may be missing from the log.
        self.floor = generation
        # Generation -> when the change it holds was made at its origin, for changes made `stamped`.
        self.stamps: dict[int, float] = {}

    @property
    def version(self) -> str:
        """Hashed on first use after a change: only SotW streams need it."""
        if self._version is None:
            self._version = _type_version(self.resources)
        return self._version

    @property
    def sotw_entries(self) -> bytes:
        """Every resource as encoded SotW response entries, joined on first use after a change."""
        if self._sotw_entries is None:
            self._sotw_entries = b"".join(res.sotw_entry() for res in self.resources.values())
        return self._sotw_entries

    def replace(self, resources: dict[str, VersionedResource], changed: Iterable[str], generation: int) -> None:
        self.resources = resources
        self._version = self._sotw_entries = None
        if generation <= self.floor:
            return  # the type's first set: no stream can ask what changed since before it, so nothing to log
        for name in changed:
            self.log.pop(name, None)
            self.log[name] = generation
        if len(self.log) > 2 * len(resources) + _TOMBSTONE_SLACK:
            forgotten = [name for name in self.log if name not in resources]
            self.floor = self.log[forgotten[-1]]
            for name in forgotten:
                del self.log[name]

    def stamp(self, generation: int, at: float) -> None:
        self.stamps[generation] = at
        if len(self.stamps) > _MAX_STAMPS:
            del self.stamps[next(iter(self.stamps))]

    def changed_at(self, generation: int) -> float | None:
        oldest = None
        for changed, at in reversed(self.stamps.items()):
            if changed <= generation:
                break
            oldest = at if oldest is None else min(oldest, at)
        return oldest

    def changed_since(self, generation: int) -> list[str] | None:
        if generation < self.floor:
            return None
        names = []
        for name, changed_at in reversed(self.log.items()):
            if changed_at <= generation:
                break
            names.append(name)
        return names


def _changed_names(old: Mapping[str, VersionedResource], new: Mapping[str, VersionedResource]) -> list[str]:
    changed = [name for name, res in new.items() if (was := old.get(name)) is None or was.version != res.version]
    changed.extend(name for name in old if name not in new)
    return changed


def _same(one: Mapping[str, VersionedResource], other: Mapping[str, VersionedResource]) -> bool:
    """The same resource objects under the same names (identity, not content: cheap, and enough for
    sets built from one projection)."""
    return len(one) == len(other) and all(other.get(name) is res for name, res in one.items())


def _same_edits(one: list[VersionedResource | str], other: list[VersionedResource | str]) -> bool:
    """The same resource objects upserted and the same names removed, in the same order."""
    return len(one) == len(other) and all(
        a is b or (isinstance(a, str) and a == b) for a, b in zip(one, other, strict=True)
    )


class _SetSharing:
    """Hands groups that end up with the same set of a type one shared dict instead of a copy each.

    A fleet placed alike is updated one group after another with the same change, so remembering the
    last change made (per type) and the last whole set stored (per type) finds nearly every repeat.
    Sets are never mutated once stored, which is what makes sharing them safe.
    """

    __slots__ = ("_sets", "_updates")

    def __init__(self) -> None:
        self._updates: dict[
            str, tuple[dict[str, VersionedResource], list[VersionedResource | str], dict[str, VersionedResource]]
        ] = {}
        """type URL -> (set before, what changed: resource upserted or name removed, set after)."""
        self._sets: dict[str, dict[str, VersionedResource]] = {}

    def updated(
        self, type_url: str, old: dict[str, VersionedResource], edits: list[VersionedResource | str]
    ) -> dict[str, VersionedResource]:
        """`old` with `edits` applied: a resource replaces the one of its name, a name is removed."""
        last = self._updates.get(type_url)
        if last is not None and last[0] is old and _same_edits(last[1], edits):
            return last[2]
        new = dict(old)
        for edit in edits:
            if isinstance(edit, str):
                del new[edit]
            else:
                new[edit.name] = edit
        self._updates[type_url] = (old, edits, new)
        return new

    def whole(self, type_url: str, new: dict[str, VersionedResource]) -> dict[str, VersionedResource]:
        """`new`, or an equal set already stored for another group."""
        last = self._sets.get(type_url)
        if last is not None and _same(last, new):
            return last
        self._sets[type_url] = new
        return new


class _Group:
    __slots__ = ("generation", "types")

    def __init__(self) -> None:
        self.generation = 0
        self.types: dict[str, _TypeState] = {}


class ResourceCache:
    """Resources per node group and per type URL; wakes streams on change.

    Generations come from one cache-wide clock, so a group that is dropped and filled again
    still moves forward for streams that saw it before. A type a group never had reads as
    unknown (``version`` is None): servers send nothing for it rather than an empty set.
    Must be used from the event loop thread.
    """

    def __init__(self) -> None:
        self._clock = 0
        self._groups: dict[str, _Group] = {}
        self._listeners: dict[str, set[Callable[[], None]]] = {}
        self._stamp: float | None = None
        self._sharing = _SetSharing()

    @contextlib.contextmanager
    def stamped(self, at: float | None) -> Iterator[None]:
        """Changes made in the block are remembered as made at `at` (Unix time) where they came from,
        e.g. a store commit, so that pushes can be timed from there; None: not known."""
        self._stamp = at
        try:
            yield
        finally:
            self._stamp = None

    def set_type(self, group: str, type_url: str, resources: Mapping[str, VersionedResource]) -> None:
        """Replace one type's whole set (keyed by resource name)."""
        new = dict(resources)
        self._commit(group, {type_url: (new, _changed_names(self.resources(group, type_url), new))})

    def update(
        self,
        group: str,
        type_url: str,
        upserts: Iterable[VersionedResource] = (),
        removals: Iterable[str] = (),
    ) -> None:
        """Add or replace some resources of one type and remove others (removals win)."""
        state = self._state(group, type_url)
        old = state.resources if state is not None else {}
        gone = set(removals)
        fresh = {res.name: res for res in upserts if res.name not in gone}
        edits: list[VersionedResource | str] = [
            res for name, res in fresh.items() if (was := old.get(name)) is None or was.version != res.version
        ]
        edits.extend(name for name in gone if name in old)
        if not edits and state is not None:
            return
        new = self._sharing.updated(type_url, old, edits)
        self._commit(group, {type_url: (new, [edit if isinstance(edit, str) else edit.name for edit in edits])})

    def set_snapshot(self, group: str, snapshot: Mapping[str, Mapping[str, VersionedResource]]) -> None:
        """Replace all types of a group at once: one generation, one wake-up.

        A type the group had but ``snapshot`` lacks becomes empty.
        """
        known = self._groups[group].types if group in self._groups else {}
        changes = {}
        for url in {*snapshot, *known}:
            new = self._sharing.whole(url, dict(snapshot.get(url, _EMPTY)))
            changes[url] = (new, _changed_names(self.resources(group, url), new))
        self._commit(group, changes)

    def resources(self, group: str, type_url: str) -> Mapping[str, VersionedResource]:
        """A read-only snapshot: later changes replace it rather than alter it."""
        state = self._state(group, type_url)
        return MappingProxyType(state.resources) if state is not None else _EMPTY

    def knows(self, group: str, type_url: str) -> bool:
        """Whether the group has had the type at all (possibly empty now)."""
        return self._state(group, type_url) is not None

    def version(self, group: str, type_url: str) -> str | None:
        """SotW version of the type's whole set, or None while the group has never had the type."""
        state = self._state(group, type_url)
        return state.version if state is not None else None

    def sotw_entries(self, group: str, type_url: str) -> bytes:
        """The type's whole set as encoded ``DiscoveryResponse.resources`` entries, shared by all streams."""
        state = self._state(group, type_url)
        return state.sotw_entries if state is not None else b""

    def changed_since(self, group: str, type_url: str, generation: int) -> list[str] | None:
        """Names upserted or removed after ``generation``; None when only a full diff can tell."""
        state = self._state(group, type_url)
        return state.changed_since(generation) if state is not None else None

    def changed_at(self, group: str, type_url: str, generation: int) -> float | None:
        """When the oldest stamped change of the type after ``generation`` was made; None for no such change."""
        state = self._state(group, type_url)
        return state.changed_at(generation) if state is not None else None

    def groups(self) -> list[str]:
        """The groups that hold resources now."""
        return list(self._groups)

    def generation(self, group: str) -> int:
        found = self._groups.get(group)
        return found.generation if found is not None else 0

    def subscribe(self, group: str, wake: Callable[[], None]) -> Callable[[], None]:
        """Call `wake` (it must not block) after every change of the group, until the returned function is
        called: a stream keeps one subscription for its life instead of a waiting task per change."""
        listeners = self._listeners.setdefault(group, set())
        listeners.add(wake)

        def unsubscribe() -> None:
            listeners.discard(wake)
            if not listeners and self._listeners.get(group) is listeners:
                del self._listeners[group]

        return unsubscribe

    async def wait_for_change(self, group: str, seen_generation: int) -> int:
        """The group's generation once it is past `seen_generation`."""
        while (generation := self.generation(group)) <= seen_generation:
            changed = asyncio.Event()
            unsubscribe = self.subscribe(group, changed.set)
            try:
                await changed.wait()
            finally:
                unsubscribe()
        return generation

    def drop_group(self, group: str) -> None:
        """Forget a group. Its streams keep what they hold until the group is filled again."""
        self._groups.pop(group, None)
        self._wake(group)

    def _state(self, group: str, type_url: str) -> _TypeState | None:
        found = self._groups.get(group)
        return found.types.get(type_url) if found is not None else None

    def _commit(self, group: str, changes: Mapping[str, tuple[dict[str, VersionedResource], list[str]]]) -> None:
        """Store new per-type sets; a new type or any changed name bumps the generation once."""
        found = self._groups.get(group)
        types = found.types if found is not None else {}
        if all(url in types and not changed for url, (_, changed) in changes.items()):
            return
        if found is None:
            found = self._groups[group] = _Group()
        self._clock += 1
        found.generation = self._clock
        for url, (new, changed) in changes.items():
            state = found.types.get(url)
            if state is None:
                state = found.types[url] = _TypeState(self._clock)
            elif not changed:
                continue
            state.replace(new, changed, self._clock)
            if changed and self._stamp is not None:
                state.stamp(self._clock, self._stamp)
        self._wake(group)

    def _wake(self, group: str) -> None:
        for wake in tuple(self._listeners.get(group, ())):
            wake()
