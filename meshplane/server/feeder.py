"""Keeps the fleet projection equal to the store: load a snapshot, then tail the event log; and with it the
revoked agent certificates, so that every replica refuses one as soon as it sees any other change."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from meshplane.model.registry import REGISTRY, Feed
from meshplane.model.rollouts import RolloutSpec
from meshplane.model.stored import ObjectKey, StoredObject
from meshplane.observability.logging import get_logger
from meshplane.observability.metrics import STORE_REVISION
from meshplane.security.revocation import RevokedCertificates
from meshplane.server.manifests import ManifestProjection
from meshplane.server.projection import DeliveredObject, FleetProjection, Hold
from meshplane.server.rollout_policies import KnownPolicies, RolloutPolicies
from meshplane.store.errors import Compacted
from meshplane.store.store import Store

log = get_logger("meshplane.server.feeder")

_ROLLOUT_KINDS = REGISTRY.kinds_feeding(Feed.ROLLOUTS)
_BATCH = 1000
"""Events read per pass; a full batch means more are waiting, so the next is read at once."""
_RENDERED = frozenset({Feed.FLEET, Feed.MANIFESTS})
"""What the manifest projection renders from: the clusters and the kinds rendered into manifests."""
_WATCHED_KINDS = [
    info.kind
    for info in REGISTRY
    if info.delivered or info.feeds & {*_RENDERED, Feed.REVOCATIONS, Feed.ROLLOUTS, Feed.ROLLOUT_POLICIES}
]


class ProjectionFeeder:
    """Level-triggered: every batch of events names objects to re-read (in the same snapshot as the events),
    never trusts event payloads. The changes this server committed itself, right after what the projection
    holds, it takes from the store's memory instead of reading them back (see `Store.held_changes`).

    What it does take from an event is its trace context: the pushes of that change join the write's trace.
    """

    def __init__(
        self,
        store: Store,
        projection: FleetProjection,
        manifests: ManifestProjection,
        poll_interval: float = 1.0,
        revoked: RevokedCertificates | None = None,
    ):
        self.store = store
        self.projection = projection
        self.manifests = manifests
        self.revoked = revoked if revoked is not None else RevokedCertificates()
        self.policies = RolloutPolicies()
        self.poll_interval = poll_interval
        self.ready = asyncio.Event()
        self.revision = 0
        self._advanced = asyncio.Event()
        self._versions: dict[tuple[ObjectKey, int], DeliveredObject | None] = {}
        """Earlier versions active rollouts keep clusters on, read from the store's history once each."""
        self._targets: dict[ObjectKey, ObjectKey] = {}
        """Rollout -> the object it rolls out, for the rollouts that hold one now."""

    async def run(self) -> None:
        while True:
            await self._load()
            try:
                await self._tail()
            except Compacted as exc:
                log.warning("event log compacted past this server; resyncing from a snapshot", floor=exc.floor)

    async def _load(self) -> None:
        revision, objects = await self.store.snapshot(_WATCHED_KINDS)
        traces = await self.store.latest_trace_contexts(_WATCHED_KINDS, revision)
        feeds = {o.key: REGISTRY.get(o.kind).feeds for o in objects}
        clusters = [o for o in objects if Feed.FLEET in feeds[o.key]]
        self.manifests.reset(o for o in objects if feeds[o.key] & _RENDERED)
        self.manifests.flush()
        self.revoked.reset(o.name for o in objects if Feed.REVOCATIONS in feeds[o.key])
        self.policies.reset(o for o in objects if Feed.ROLLOUT_POLICIES in feeds[o.key])
        delivered = [o for o in objects if REGISTRY.get(o.kind).delivered]
        self._targets = {}
        holds = await self._holds(
            [o.key for o in objects if Feed.ROLLOUTS in feeds[o.key]], {o.key: o for o in objects}
        )
        self.projection.reset(delivered, clusters, traces, {k: h for k, h in holds.items() if h is not None})
        self._advance(revision)
        self.ready.set()
        log.info("projection loaded", revision=revision, objects=len(delivered), clusters=len(clusters))

    async def _tail(self) -> None:
        while True:
            held = self.store.held_changes(self.revision)
            events, current = held or await self.store.changes_since(self.revision, _BATCH, status_changes=False)
            changed: dict[ObjectKey, Mapping[str, str] | None] = {}
            oldest: float | None = None
            for event in events:
                if event.kind in _WATCHED_KINDS and event.op != "status":
                    changed[(event.kind, event.project, event.name)] = event.trace_context
                    oldest = oldest or event.created_at.timestamp()
            if changed:
                holds = await self._holds([key for key in changed if key[0] in _ROLLOUT_KINDS], current)
                # The pushes of this batch are timed from its oldest change; the feeder is the cache's only writer.
                with self.projection.cache.stamped(oldest):
                    self._apply(changed, current, holds)
            if events:
                self._advance(events[-1].revision)
            if len(events) < _BATCH:
                await self._next_revision()

    async def _next_revision(self) -> None:
        """Until the store has a revision past what the projection holds: while nothing is written, the event
        log is not read, only the revision, once a poll interval."""
        while await self.store.wait_for_revision(self.revision, timeout=self.poll_interval) <= self.revision:
            continue

    async def _holds(
        self, rollouts: list[ObjectKey], current: Mapping[ObjectKey, StoredObject]
    ) -> dict[ObjectKey, Hold | None]:
        """What each of these rollouts holds its object to now (None: nothing, it is over or gone), with the
        earlier versions it keeps read from the store's history."""
        holds: dict[ObjectKey, Hold | None] = {}
        for key in rollouts:
            stored = current.get(key)
            spec = RolloutSpec.model_validate(stored.spec) if stored is not None else None
            if spec is None or not spec.phase.active:
                if (target := self._targets.pop(key, None)) is not None:
                    holds[target] = None
                continue
            target = (spec.target.kind, key[1], spec.target.name)
            self._targets[key] = target
            revisions = {spec.from_revision, *spec.held.values()} - {None}
            versions = {revision: await self._version(target, revision) for revision in revisions}
            if any(versions.get(r) is None for r in revisions):
                log.error("a version a rollout keeps is not in the history; its object is not held", rollout=key[2])
                holds[target] = None
                continue
            kept = {cluster: versions[r] if r is not None else None for cluster, r in spec.held.items()}
            baseline = versions[spec.from_revision] if spec.from_revision is not None else None
            holds[target] = Hold(frozenset(spec.released), kept, baseline)
        held = set(self._targets.values())
        self._versions = {k: v for k, v in self._versions.items() if k[0] in held}
        return holds

    async def _version(self, key: ObjectKey, revision: int) -> DeliveredObject | None:
        if (key, revision) not in self._versions:
            stored = await self.store.version_in_force(*key, revision)
            self._versions[(key, revision)] = self.projection.deliverable(stored) if stored is not None else None
        return self._versions[(key, revision)]

    def _apply(
        self,
        changes: Mapping[ObjectKey, Mapping[str, str] | None],
        current: Mapping[ObjectKey, StoredObject],
        holds: Mapping[ObjectKey, Hold | None],
    ) -> None:
        """Update the projection from the objects as the batch's snapshot has them (absent: deleted), without
        yielding, so one batch of events reaches each stream as one push. `changes`: each object's latest
        trace context. Rollouts' holds go first: an object and the rollout that governs its change are
        written together, and no cluster may see the change before its hold."""
        for target, hold in holds.items():
            self.projection.hold(target, hold)
        for key, trace in changes.items():
            kind, _, name = key
            info = REGISTRY.get(kind)
            stored = current.get(key)
            if Feed.ROLLOUTS in info.feeds:
                continue
            if Feed.ROLLOUT_POLICIES in info.feeds:
                if stored is None:
                    self.policies.remove(key)
                else:
                    self.policies.upsert(stored)
                continue
            if Feed.REVOCATIONS in info.feeds:
                if stored is None:
                    self.revoked.forget(name)
                else:
                    self.revoked.revoke(name)
                continue
            if info.feeds & _RENDERED:
                if stored is None:
                    self.manifests.remove(key)
                else:
                    self.manifests.upsert(stored)
            if Feed.FLEET in info.feeds:
                if stored is None:
                    self.projection.remove_cluster(name)
                else:
                    self.projection.upsert_cluster(name, stored.labels)
            elif not info.delivered:
                continue
            elif stored is None:
                self.projection.remove_object(key)
            else:
                self.projection.upsert_object(stored, trace)
        self.manifests.flush()

    async def reached(self, revision: int) -> None:
        """Until the projection holds every write up to `revision`: what a write-time check reads from it then
        includes that write (with this store's `committed`, every write this server has answered)."""
        while self.revision < revision:
            self._advanced.clear()
            await self._advanced.wait()

    async def known_policies(self, project: str, seen_from: int = 0) -> KnownPolicies:
        """The project's rollout policies as held now, once they include the write at `seen_from`. A write
        weighed against them is fenced at their revision (see `rollout_writes`): one that a policy written
        meanwhile would govern is refused and weighed again, so they need not wait for this server's writes."""
        await self.reached(seen_from)
        return KnownPolicies(self.policies.of(project), self.revision)

    def _advance(self, revision: int) -> None:
        self.revision = revision
        STORE_REVISION.set(revision)
        self._advanced.set()
