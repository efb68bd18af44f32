"""Status roll-up: fold what clusters reported into each object's `status.clusters[]` and each
cluster's count of objects out of date, over all projects and per project.

The per-object decision is a pure function; the runner only finds what changed (reports since the
last pass, objects the projection touched) and writes a status when it differs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime, timedelta

from meshplane.model.status import DeliveryState
from meshplane.model.stored import ObjectKey
from meshplane.observability.logging import get_logger
from meshplane.observability.metrics import DELIVERY_LAG_REVISIONS, DELIVERY_LAG_SECONDS
from meshplane.server.control_plane import ClusterRegistry
from meshplane.server.leader import Leadership
from meshplane.server.projection import DeliveredObject, FleetProjection
from meshplane.store.records import Delivery
from meshplane.store.store import Store

log = get_logger("meshplane.server.status")

_BATCH = 200
_ENTRIES_PER_WRITE = 2000
_ENTRIES_PER_ROLL = 20_000
"""Placements a pass reads and rolls up at once: an object on a whole fleet brings a report and a status
entry per cluster, and what one batch builds is written and freed before the next is read."""
# Reports are found by their timestamps; re-reading a little of the past covers clock skew between
# replicas, and rolling an object up twice changes nothing.
_OVERLAP = timedelta(seconds=2)


def delivery_entries(
    versions: Mapping[str, str],
    reported: Mapping[str, Delivery],
    previous: Iterable[Mapping[str, str]],
    now: str,
) -> list[dict[str, str]]:
    """`status.clusters[]` of one object: one entry per cluster that should hold it, in name order, judged
    against the version that cluster should hold (`versions`: the newest, or where a rollout has not reached
    yet the one it keeps there).

    A report about another version than that one says nothing about it: that cluster is Pending.
    lastTransitionTime moves only when the state does.
    """
    before = {entry.get("cluster"): entry for entry in previous}
    entries = []
    for cluster in sorted(versions):
        version = versions[cluster]
        report = reported.get(cluster)
        if report is not None and report.version == version:
            state, message = report.state, report.message
        else:
            state, message = DeliveryState.PENDING.value, ""
        entry = {"cluster": cluster, "state": state, "version": version}
        if message:
            entry["message"] = message
        old = before.get(cluster)
        same = old is not None and old.get("state") == state and old.get("version") == version
        entry["lastTransitionTime"] = old.get("lastTransitionTime", now) if same and old else now
        entries.append(entry)
    return entries


Behind = tuple[int, datetime] | None
"""Of one cluster: the lowest revision and the oldest change time among the objects it has not applied."""


def behind(unapplied: Iterable[ObjectKey], objects: Mapping[ObjectKey, DeliveredObject]) -> Behind:
    changes = [objects[key] for key in unapplied if key in objects]
    if not changes:
        return None
    return min(change.revision for change in changes), min(change.changed_at for change in changes)


def lag_of(since: Behind, revision: int, now: datetime) -> tuple[int, float]:
    """How far one cluster is behind: the store revisions since the last one it holds everything up to,
    and the age of its oldest unapplied change; (0, 0.0) when in sync."""
    if since is None:
        return 0, 0.0
    lowest, oldest = since
    return revision - (lowest - 1), max(0.0, (now - oldest).total_seconds())


def cluster_summary(out_of_date: int, since: Behind, errors: Mapping[ObjectKey, tuple[str, str]]) -> dict[str, object]:
    """A cluster's objects out of date, since when it is behind, and its newest failure (the failing object
    and why), given its failures (since when, why) by object."""
    return {
        "outOfDate": out_of_date,
        "behindSince": since[1].isoformat() if since else None,
        "lastError": max(errors.values())[1] if errors else None,
    }


def summaries_by_project(
    stale: Iterable[ObjectKey],
    errors: Mapping[ObjectKey, tuple[str, str]],
    objects: Mapping[ObjectKey, DeliveredObject],
) -> dict[str, dict[str, object]]:
    """`cluster_summary` of each project's objects alone, for the projects with objects out of date there:
    what a token bound to a project is shown of the cluster, which names no other project's objects."""
    stale_in: dict[str, list[ObjectKey]] = {}
    errors_in: dict[str, dict[ObjectKey, tuple[str, str]]] = {}
    for key in stale:
        stale_in.setdefault(key[1], []).append(key)
    for key, error in errors.items():
        errors_in.setdefault(key[1], {})[key] = error
    return {
        project: cluster_summary(len(keys), behind(keys, objects), errors_in.get(project, {}))
        for project, keys in sorted(stale_in.items())
        if project
    }


def delivery_lag(
    unapplied: Iterable[ObjectKey], objects: Mapping[ObjectKey, DeliveredObject], revision: int, now: datetime
) -> tuple[int, float]:
    return lag_of(behind(unapplied, objects), revision, now)


def _status_writes(
    statuses: Iterable[tuple[ObjectKey, list[dict]]],
) -> Iterator[tuple[str, str, dict[str, dict]]]:
    """The changed statuses as transactions: one per kind and project, up to _BATCH objects and
    _ENTRIES_PER_WRITE cluster entries each, so a cluster reporting thousands of objects is a few commits
    and an object placed on a whole fleet does not make one huge transaction."""
    by_owner: dict[tuple[str, str], list[tuple[str, list[dict]]]] = {}
    for (kind, project, name), entries in statuses:
        by_owner.setdefault((kind, project), []).append((name, entries))
    for (kind, project), named in sorted(by_owner.items()):
        batch: dict[str, dict] = {}
        size = 0
        for name, entries in sorted(named, key=lambda item: item[0]):
            if batch and (len(batch) >= _BATCH or size + len(entries) > _ENTRIES_PER_WRITE):
                yield kind, project, batch
                batch, size = {}, 0
            batch[name] = {"clusters": entries}
            size += len(entries)
        if batch:
            yield kind, project, batch


class StatusRollup:
    def __init__(
        self,
        store: Store,
        projection: FleetProjection,
        clusters: ClusterRegistry,
        leadership: Leadership,
        interval: float = 0.5,
    ):
        self.store = store
        self.leadership = leadership
        self.projection = projection
        self.clusters = clusters
        self.interval = interval
        self.wake = asyncio.Event()
        self._since: datetime | None = None
        self._rolled: dict[tuple[str, str, str, str], datetime] = {}
        """The reports inside the overlap already rolled up, by (cluster, kind, project, name): the overlap
        re-reads them at every pass, and rolling them up again would cost a pass over them for ever."""
        self._stale: dict[str, set[ObjectKey]] = {}
        """Per cluster, the objects it is behind on; one way round only: a fleet that does not report is
        behind on everything, and the other way round as well would be a second copy of that."""
        self._behind: dict[str, Behind] = {}
        """Per cluster, kept for the clusters a pass touched only: a pass costs what changed, not the fleet."""
        self._touched: set[str] = set()
        self._failing: set[str] = set()
        """Of the clusters touched, those whose failures changed: recounted before a batch's statuses go out."""
        self._errors: dict[str, dict[ObjectKey, tuple[str, str]]] = {}
        """cluster -> object -> (since when, why) it fails there, for the objects failing there now."""
        self._published_counts: dict[str, dict[str, object]] = {}
        self._lag_published: dict[str, tuple[int, float]] = {}
        """What each cluster's lag gauges were last set to: a pass sets only those that moved."""

    async def run(self) -> None:
        # Off the leader, the lag gauges are dropped: the leader's figures are the ones that hold.
        await self.leadership.passes(
            self.pass_once, self.wake, self.interval, "status roll-up pass", meanwhile=lambda: self._publish_lag({})
        )

    async def pass_once(self) -> None:
        dirty = await self._reported() | self.projection.take_dirty()
        for keys in self._batches(sorted(dirty)):
            statuses = await self._roll(keys)
            # A failure is counted on its cluster before the object statuses that show it go out: whoever sees
            # an object fail on a cluster (`apply --wait`) then finds the failure in that cluster's status too.
            failing, self._failing = self._failing, set()
            if failing:
                await self._publish_clusters(failing)
            for kind, project, changes in _status_writes(statuses):
                # An object deleted meanwhile is skipped: its deliveries go with it.
                await self.store.merge_statuses(kind, project, changes)
        touched, self._touched = self._touched, set()
        await self._publish_clusters(touched | (self.projection.clusters.keys() - self._published_counts.keys()))
        revision, now = await self.store.current_revision(), datetime.now(UTC)
        self._publish_lag({cluster: lag_of(since, revision, now) for cluster, since in self._behind.items()})

    async def _reported(self) -> set[ObjectKey]:
        """The objects with reports this roll-up has not rolled up yet. The first pass rolls up every object
        reported (each is read with its reports), so it reads the reports' times only, not the reports."""
        if self._since is None:
            keys, self._since = await self.store.delivered_objects()
            return keys
        reports = await self.store.deliveries_changed(self._since - _OVERLAP)
        fresh = [d for d in reports if self._rolled.get((d.cluster, d.kind, d.project, d.name)) != d.updated_at]
        if reports:
            self._since = max(d.updated_at for d in reports)
            horizon = self._since - _OVERLAP
            self._rolled = {key: at for key, at in self._rolled.items() if at >= horizon}
        return {(d.kind, d.project, d.name) for d in fresh}

    def _batches(self, keys: list[ObjectKey]) -> Iterator[list[ObjectKey]]:
        """`keys` in runs of at most _BATCH objects and, past the first object of a run, _ENTRIES_PER_ROLL
        placements (the clusters an object is placed on)."""
        batch: list[ObjectKey] = []
        size = 0
        for key in keys:
            placements = max(len(self.projection.placed.get(key, ())), 1)
            if batch and (len(batch) >= _BATCH or size + placements > _ENTRIES_PER_ROLL):
                yield batch
                batch, size = [], 0
            batch.append(key)
            size += placements
        if batch:
            yield batch

    async def _roll(self, keys: list[ObjectKey]) -> list[tuple[ObjectKey, list[dict]]]:
        """Each key's delivery entries, counted against its clusters; returns the entries that changed, for
        the caller to write."""
        changed: list[tuple[ObjectKey, list[dict]]] = []
        reported: dict[ObjectKey, dict[str, Delivery]] = {}
        horizon = self._since - _OVERLAP if self._since is not None else None
        for delivery in await self.store.deliveries_of(keys):
            reported.setdefault((delivery.kind, delivery.project, delivery.name), {})[delivery.cluster] = delivery
            if horizon is not None and delivery.updated_at >= horizon:
                self._rolled[(delivery.cluster, delivery.kind, delivery.project, delivery.name)] = delivery.updated_at
        now = datetime.now(UTC).isoformat()
        stored_objects = await self.store.get_many(key for key in keys if key in self.projection.objects)
        for key in keys:
            obj = self.projection.objects.get(key)
            versions = self.projection.served_versions(key)
            gone = [cluster for cluster, stale in self._stale.items() if key in stale and cluster not in versions]
            for cluster in gone:
                self._mark(cluster, key, stale=False)
                self._set_error(cluster, key, None)
            if obj is None:
                await self.store.forget_deliveries(*key)
                continue
            stored = stored_objects.get(key)
            if stored is None:
                continue
            entries = delivery_entries(versions, reported.get(key, {}), stored.status.get("clusters", []), now)
            for entry in entries:
                self._mark(entry["cluster"], key, stale=entry["state"] != DeliveryState.APPLIED.value)
                error = None
                if entry["state"] == DeliveryState.FAILED.value:
                    what = f"{key[0]} {'/'.join(filter(None, key[1:]))}: {entry.get('message', '')}"
                    error = (entry["lastTransitionTime"], what)
                self._set_error(entry["cluster"], key, error)
            if entries != stored.status.get("clusters", []):
                changed.append((key, entries))
        return changed

    def _mark(self, cluster: str, key: ObjectKey, stale: bool) -> None:
        """Record whether `cluster` is behind on `key`; a cluster whose set changes is looked at again."""
        if (key in self._stale.get(cluster, ())) == stale:
            return
        if stale:
            self._stale.setdefault(cluster, set()).add(key)
        else:
            behind_on = self._stale[cluster]
            behind_on.discard(key)
            if not behind_on:  # an emptied set goes: it keeps the room it grew to while the cluster synced
                del self._stale[cluster]
        self._touched.add(cluster)

    def _set_error(self, cluster: str, key: ObjectKey, error: tuple[str, str] | None) -> None:
        """Record why `key` fails on `cluster` (None: it does not); a cluster whose errors change is looked at
        again, as one whose out-of-date set does (an object already behind may fail later)."""
        if self._errors.get(cluster, {}).get(key) == error:
            return
        if error is None:
            errors = self._errors[cluster]
            del errors[key]
            if not errors:
                del self._errors[cluster]
        else:
            self._errors.setdefault(cluster, {})[key] = error
        self._touched.add(cluster)
        self._failing.add(cluster)

    async def _publish_clusters(self, clusters: set[str]) -> None:
        """Recount `clusters`: each one's objects out of date, since when it is behind and its newest failure,
        written where they moved. These change only when a cluster's sets do, so a status write is rare even
        while a cluster stays behind, and a pass recounts the clusters it touched, not the fleet."""
        known = self.projection.clusters.keys()
        for cluster in self._behind.keys() - known:
            del self._behind[cluster]
        for cluster in self._published_counts.keys() - known:
            del self._published_counts[cluster]
        for cluster in sorted(clusters & known):
            stale, errors = self._stale.get(cluster, set()), self._errors.get(cluster, {})
            self._behind[cluster] = behind(stale, self.projection.objects)
            summary = {
                **cluster_summary(len(stale), self._behind[cluster], errors),
                "byProject": summaries_by_project(stale, errors, self.projection.objects),
            }
            if self._published_counts.get(cluster) != summary:
                self.clusters.update_status(cluster, **summary)
                self._published_counts[cluster] = summary
        await self.clusters.flush()

    def _publish_lag(self, lags: Mapping[str, tuple[int, float]]) -> None:
        """Set each cluster's lag gauges that moved, and drop those of clusters no longer listed."""
        for cluster in self._lag_published.keys() - lags.keys():
            DELIVERY_LAG_REVISIONS.remove(cluster)
            DELIVERY_LAG_SECONDS.remove(cluster)
        for cluster, lag in lags.items():
            if self._lag_published.get(cluster) != lag:
                DELIVERY_LAG_REVISIONS.labels(cluster).set(lag[0])
                DELIVERY_LAG_SECONDS.labels(cluster).set(lag[1])
        self._lag_published = dict(lags)
