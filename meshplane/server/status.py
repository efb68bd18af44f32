"""Status roll-up: fold what clusters reported into each object's `status.clusters[]` and each
cluster's count of objects out of date.

The per-object decision is a pure function; the runner only finds what changed (reports since the
last pass, objects the projection touched) and writes a status when it differs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta

from meshplane.model.status import DeliveryState
from meshplane.observability.logging import get_logger
from meshplane.server.control_plane import ClusterRegistry
from meshplane.server.leader import Leadership
from meshplane.server.projection import FleetProjection, ObjectKey
from meshplane.store.errors import NotFound
from meshplane.store.records import Delivery
from meshplane.store.store import Store

log = get_logger("meshplane.server.status")

_BATCH = 200
# Reports are found by their timestamps; re-reading a little of the past covers clock skew between
# replicas, and rolling an object up twice changes nothing.
_OVERLAP = timedelta(seconds=2)


def delivery_entries(
    placed: Iterable[str],
    version: str,
    reported: Mapping[str, Delivery],
    previous: Iterable[Mapping[str, str]],
    now: str,
) -> list[dict[str, str]]:
    """`status.clusters[]` of one object: one entry per placed cluster, in name order.

    A report about another version than the current one says nothing about it: that cluster is
    Pending. lastTransitionTime moves only when the state does.
    """
    before = {entry.get("cluster"): entry for entry in previous}
    entries = []
    for cluster in sorted(placed):
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
        self._stale: dict[str, set[ObjectKey]] = {}
        self._published_counts: dict[str, int] = {}

    async def run(self) -> None:
        while True:
            try:
                if self.leadership.is_leader:
                    await self.pass_once()
            except Exception:
                log.exception("status roll-up pass failed; retrying")
            self.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), self.interval)

    async def pass_once(self) -> None:
        reports = await self.store.deliveries_changed(self._since - _OVERLAP if self._since else None)
        if reports:
            self._since = max(d.updated_at for d in reports)
        dirty = {(d.kind, d.project, d.name) for d in reports} | self.projection.take_dirty()
        keys = sorted(dirty)
        for start in range(0, len(keys), _BATCH):
            await self._roll(keys[start : start + _BATCH])
        await self._publish_cluster_counts()

    async def _roll(self, keys: list[ObjectKey]) -> None:
        reported: dict[ObjectKey, dict[str, Delivery]] = {}
        for delivery in await self.store.deliveries_of(keys):
            reported.setdefault((delivery.kind, delivery.project, delivery.name), {})[delivery.cluster] = delivery
        now = datetime.now(UTC).isoformat()
        for key in keys:
            obj = self.projection.objects.get(key)
            placed = self.projection.placed.get(key, frozenset())
            for cluster, stale in self._stale.items():
                if cluster not in placed:
                    stale.discard(key)
            if obj is None:
                await self.store.forget_deliveries(*key)
                continue
            try:
                stored = await self.store.get(*key)
            except NotFound:
                continue
            entries = delivery_entries(
                placed, obj.resource.version, reported.get(key, {}), stored.status.get("clusters", []), now
            )
            for entry in entries:
                stale = self._stale.setdefault(entry["cluster"], set())
                if entry["state"] == DeliveryState.APPLIED.value:
                    stale.discard(key)
                else:
                    stale.add(key)
            if entries != stored.status.get("clusters", []):
                await self.store.merge_status(*key, {"clusters": entries})

    async def _publish_cluster_counts(self) -> None:
        for cluster in self.projection.clusters:
            count = len(self._stale.get(cluster, ()))
            if self._published_counts.get(cluster) != count:
                await self.clusters.update_status(cluster, outOfDate=count)
                self._published_counts[cluster] = count
