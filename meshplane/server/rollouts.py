"""The rollout driver: moves each active rollout on, one replica at a time (the leader).

Everything a rollout is lives in its Rollout object, so a replica killed mid-rollout loses nothing: whichever
replica leads next reads it and goes on. A pass observes each progressing rollout's clusters (connected, what
they report of the change's version, the object's request figures there), asks the planner
(`server.rollout_plan`) for the next state, and writes it guarded by the revision it read; a rollout someone
else changed meanwhile (an action, a newer write) is looked at again on the next pass.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import UTC, datetime

from meshplane.audit import Actor, acting_as
from meshplane.model.rollouts import Phase, RolloutSpec
from meshplane.model.stored import ObjectKey, StoredObject
from meshplane.observability.logging import get_logger
from meshplane.observability.metrics import ROLLOUT_TRANSITIONS
from meshplane.server.feeder import ProjectionFeeder
from meshplane.server.leader import Leadership
from meshplane.server.projection import FleetProjection
from meshplane.server.rollout_plan import Observed, advance
from meshplane.server.rollout_writes import ROLLOUT
from meshplane.store.batch import WriteBatch
from meshplane.store.errors import Conflict, NotFound
from meshplane.store.store import Store

log = get_logger("meshplane.server.rollouts")

FIGURED_KIND = "API"
"""The kind gateways count requests for: the error-ratio gate judges its rollouts only."""


def target_of(rollout: StoredObject, spec: RolloutSpec) -> ObjectKey:
    return (spec.target.kind, rollout.project, spec.target.name)


async def save(store: Store, rollout: StoredObject, spec: RolloutSpec) -> StoredObject:
    """Write a rollout's new state, unless it changed since `rollout` was read (Conflict)."""
    stored, _ = await store.put(
        ROLLOUT, rollout.project, rollout.name, spec=spec.to_wire(), expected_revision=rollout.revision
    )
    return stored


async def restore(store: Store, rollout: StoredObject, spec: RolloutSpec) -> StoredObject:
    """End a rollout that failed or was aborted (`spec`, its final state): the object is written back to the
    version its unreached clusters serve (a new revision, attributed to the rollout), or deleted if the change
    made it; both in one transaction, the object first, so no reader sees the rollout end before the object is
    what every cluster may serve."""
    target = target_of(rollout, spec)
    baseline = None
    if spec.from_revision is not None:
        baseline = await store.version_in_force(*target, spec.from_revision)
        if baseline is None:
            raise NotFound(*target)
    reason = spec.reason
    restored = f"restored to revision {spec.from_revision}" if baseline is not None else "the object it made deleted"
    final = spec.model_copy(update={"reason": f"{reason}; {restored}" if reason else restored})

    def decide(batch: WriteBatch) -> StoredObject:
        current_rollout = batch.current(*rollout.key)
        if current_rollout is None or current_rollout.revision != rollout.revision:
            found = current_rollout.revision if current_rollout is not None else 0
            raise Conflict(*rollout.key, current=found, given=rollout.revision)
        obj = batch.current(*target)
        if obj is not None and not obj.deleted:
            if baseline is None:
                batch.record(batch.changed_from(obj, deleted=True), "delete")
            else:
                written = {"spec": baseline.spec, "labels": baseline.labels, "annotations": baseline.annotations}
                changed = (obj.spec, obj.labels, obj.annotations) != (
                    baseline.spec,
                    baseline.labels,
                    baseline.annotations,
                )
                if changed:
                    generation = obj.generation + (baseline.spec != obj.spec)
                    batch.record(batch.changed_from(obj, generation=generation, **written), "update")
        ended = batch.changed_from(current_rollout, spec=final.to_wire(), generation=current_rollout.generation + 1)
        return batch.record(ended, "update")

    return await store.transact([rollout.key, target], decide)


class RolloutDriver:
    def __init__(
        self,
        store: Store,
        projection: FleetProjection,
        feeder: ProjectionFeeder,
        leadership: Leadership,
        interval: float = 0.5,
    ):
        self.store = store
        self.projection = projection
        self.feeder = feeder
        self.leadership = leadership
        self.interval = interval
        self.wake = asyncio.Event()

    async def run(self) -> None:
        await self.leadership.passes(self.pass_once, self.wake, self.interval, "rollout pass")

    async def pass_once(self) -> None:
        if not self.feeder.ready.is_set():
            return
        rollouts, _ = await self.store.list(ROLLOUT, where=lambda o: o.spec.get("phase") == Phase.PROGRESSING.value)
        if not rollouts:
            return
        clusters, _ = await self.store.list("Cluster")
        connected = {c.name: bool(c.status.get("connected")) for c in clusters}
        for rollout in rollouts:
            try:
                with acting_as(Actor(f"rollout/{rollout.name}")):  # what a rollout writes is audited as its own
                    await self._drive(rollout, connected)
            except Conflict:
                continue  # changed meanwhile: the next pass reads it afresh
            except Exception:
                log.exception("rollout step failed; retrying on the next pass", rollout=rollout.name)

    async def _drive(self, rollout: StoredObject, connected: Mapping[str, bool]) -> None:
        spec = RolloutSpec.model_validate(rollout.spec)
        if self.feeder.revision < rollout.revision:
            return  # the projection has not seen this state of the rollout yet
        target = target_of(rollout, spec)
        obj = self.projection.objects.get(target)
        now = datetime.now(UTC)
        if obj is None:
            ended = spec.model_copy(
                update={"phase": Phase.ABORTED, "reason": "the object was deleted", "finished_at": now.isoformat()}
            )
            await save(self.store, rollout, ended)
            return
        placed = {c: self.projection.clusters[c] for c in self.projection.placed.get(target, ()) if c in connected}
        observed = await self._observe(target, obj.resource.version, placed, connected)
        moved = advance(spec, placed, observed, now)
        if moved == spec:
            return
        if moved.phase is Phase.ROLLED_BACK:
            log.warning("rollout failed; rolling back", rollout=rollout.name, reason=moved.reason)
            await restore(self.store, rollout, moved)
        else:
            await save(self.store, rollout, moved)
        if moved.phase is not spec.phase:
            ROLLOUT_TRANSITIONS.labels(moved.phase.value).inc()
        elif moved.current_wave != spec.current_wave:
            ROLLOUT_TRANSITIONS.labels("NextWave").inc()
        if moved.current_wave != spec.current_wave or moved.phase is not spec.phase:
            log.info(
                "rollout moved",
                rollout=rollout.name,
                phase=moved.phase.value,
                wave=moved.current_wave,
                reason=moved.reason,
            )

    async def _observe(
        self, target: ObjectKey, version: str, placed: Mapping[str, object], connected: Mapping[str, bool]
    ) -> dict[str, Observed]:
        """Each placed cluster as the planner needs it: connected, its report of `version`, its figures."""
        reports = {d.cluster: d for d in await self.store.deliveries_of([target]) if d.version == version}
        figures = {}
        if target[0] == FIGURED_KIND:
            figures = await self.store.figures_of(target[1], target[2], list(placed))
        observed = {}
        for cluster in placed:
            report, figure = reports.get(cluster), figures.get(cluster)
            observed[cluster] = Observed(
                connected=connected.get(cluster, False),
                state=report.state if report is not None else None,
                message=report.message if report is not None else "",
                requests=figure.requests if figure is not None else None,
                errors=figure.errors if figure is not None else None,
            )
        return observed
