"""The wave planner and the rollout step: pure functions of a rollout, the clusters and what they report.

The driver (`server.rollouts`) gathers what it observes and writes what these return; every rule of how a change
advances, fails and rolls back lives here, where it is tested without a fleet.

Rules. Each placed cluster belongs to exactly one wave: the first wave naming or selecting it, else the first
wave without a selector (the rest), else the last wave. Clusters are given the change (released) only in the
current wave, at most `maxConcurrent` unfinished at a time; released clusters never go back to waiting. A wave
is done when each of its clusters applied the change (or, offline: Skip, was not connected when its turn came),
and its bake passed with no failure signal; then the next wave starts. A cluster that fails to apply the change,
or a 5xx share above `errorRatio` among at least `minRequests` requests at the wave's clusters since its bake
began, fails the wave: the rollout rolls back or pauses, as its policy says.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from meshplane.model.rollouts import (
    ClusterState,
    Offline,
    OnFailure,
    Phase,
    RolloutCluster,
    RolloutSpec,
    RolloutWave,
    Wave,
    WaveState,
)

Labels = Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Observed:
    """One cluster as the driver sees it now: whether it is connected, what it reported of the change's version
    (None: nothing yet), and the object's cumulative request and 5xx counts there (None: no figures)."""

    connected: bool = True
    state: str | None = None
    message: str = ""
    requests: int | None = None
    errors: int | None = None


def assign_waves(waves: Sequence[Wave], clusters: Mapping[str, Labels]) -> list[list[str]]:
    """The clusters of each wave, in name order: every cluster in exactly one."""
    members: list[list[str]] = [[] for _ in waves]
    rest = next((i for i, wave in enumerate(waves) if wave.is_rest), len(waves) - 1)
    for cluster in sorted(clusters):
        labels = dict(clusters[cluster])
        chosen = next((i for i, wave in enumerate(waves) if wave.selects(cluster, labels)), rest)
        members[chosen].append(cluster)
    return members


def start(spec: RolloutSpec, now: datetime, superseded: RolloutSpec | None = None) -> RolloutSpec:
    """A new rollout's first state, no cluster given the change yet. Clusters a still-active rollout
    (`superseded`) had taken keep what it gave them until their wave comes, as the others keep `fromRevision`."""
    held: dict[str, int | None] = {}
    from_revision = spec.from_revision
    if superseded is not None and superseded.phase.active:
        from_revision = superseded.from_revision
        held = {c: r for c, r in superseded.held.items() if c not in superseded.released}
        held.update(dict.fromkeys(superseded.released, superseded.to_revision))
    return spec.model_copy(
        update={
            "from_revision": from_revision,
            "held": held,
            "released": [],
            "waves": [RolloutWave(name=wave.name) for wave in spec.strategy.waves],
            "current_wave": 0,
            "phase": Phase.PROGRESSING,
            "reason": "",
            "started_at": now.isoformat(),
            "finished_at": None,
        }
    )


def advance(
    spec: RolloutSpec, placed: Mapping[str, Labels], observed: Mapping[str, Observed], now: datetime
) -> RolloutSpec:
    """The rollout one step on: waves refreshed to the clusters placed now, the current wave's clusters released
    and judged, the wave finished or failed. A rollout that is not progressing is returned as it is."""
    if spec.phase is not Phase.PROGRESSING:
        return spec
    released = set(spec.released)
    waves = _refreshed(spec, placed)
    index = spec.current_wave
    while index < len(waves):
        wave, policy_wave = waves[index], spec.strategy.waves[index]
        wave, released, failure = _judge(spec, wave, policy_wave, released, observed, now)
        waves[index] = wave
        if failure is not None:
            return _failed(spec, waves, index, released, failure, now)
        if wave.state is not WaveState.SUCCEEDED:
            break
        index += 1
    update: dict[str, object] = {"waves": waves, "current_wave": index, "released": sorted(released)}
    if index >= len(waves):
        update |= {"phase": Phase.SUCCEEDED, "reason": "every wave succeeded", "finished_at": now.isoformat()}
    return spec.model_copy(update=update)


def _refreshed(spec: RolloutSpec, placed: Mapping[str, Labels]) -> list[RolloutWave]:
    """The recorded waves with their cluster lists made the planner's for the clusters placed now (states kept;
    a cluster no longer placed leaves its wave)."""
    recorded = {c.name: c for wave in spec.waves for c in wave.clusters}
    plan = assign_waves(spec.strategy.waves, placed)
    waves = list(spec.waves) or [RolloutWave(name=w.name) for w in spec.strategy.waves]
    return [
        wave.model_copy(update={"clusters": [recorded.get(name) or RolloutCluster(name=name) for name in names]})
        for wave, names in zip(waves, plan, strict=True)
    ]


def _judge(
    spec: RolloutSpec,
    wave: RolloutWave,
    policy_wave: Wave,
    released: set[str],
    observed: Mapping[str, Observed],
    now: datetime,
) -> tuple[RolloutWave, set[str], str | None]:
    """The current wave after one look: (wave, released clusters, why it failed or None)."""
    stamp = now.isoformat()
    offline = spec.strategy.offline
    clusters = [_observe(c, observed.get(c.name), offline, stamp) for c in wave.clusters]
    unfinished = sum(c.state is ClusterState.PENDING for c in clusters)
    room = (policy_wave.max_concurrent or len(clusters)) - unfinished
    for i, cluster in enumerate(clusters):
        if cluster.state is ClusterState.WAITING and room > 0:
            seen = observed.get(cluster.name, Observed())
            skipped = not seen.connected and offline is Offline.SKIP
            state = ClusterState.SKIPPED if skipped else ClusterState.PENDING
            clusters[i] = _observe(cluster.model_copy(update={"state": state, "since": stamp}), seen, offline, stamp)
            released.add(cluster.name)
            room -= clusters[i].state is ClusterState.PENDING
    wave = wave.model_copy(update={"clusters": clusters, "state": WaveState.PROGRESSING})
    failed = [c for c in clusters if c.state is ClusterState.FAILED]
    if failed and spec.strategy.fail_on.nack:
        reason = "; ".join(f"{c.name}: {c.message or 'failed to apply'}" for c in failed)
        return wave.model_copy(update={"state": WaveState.FAILED}), released, f"wave {wave.name} failed: {reason}"
    if any(c.state not in (ClusterState.APPLIED, ClusterState.SKIPPED, ClusterState.FAILED) for c in clusters):
        return wave, released, None
    baked = _bake(spec, wave, policy_wave, observed, now)
    return baked, released, _error_ratio_failure(spec, baked, observed)


def _observe(cluster: RolloutCluster, seen: Observed | None, offline: Offline, stamp: str) -> RolloutCluster:
    """A released cluster's state from what it reported of the change's version."""
    if cluster.state in (ClusterState.WAITING, ClusterState.APPLIED) or seen is None:
        return cluster
    if cluster.state is ClusterState.SKIPPED and not seen.connected:
        return cluster
    state = {"Applied": ClusterState.APPLIED, "Failed": ClusterState.FAILED}.get(seen.state or "", cluster.state)
    if cluster.state is ClusterState.SKIPPED and state is ClusterState.SKIPPED:
        return cluster
    if state is cluster.state and (seen.message or None) == cluster.message:
        return cluster
    return cluster.model_copy(update={"state": state, "message": seen.message or None, "since": stamp})


def _bake(
    spec: RolloutSpec, wave: RolloutWave, policy_wave: Wave, observed: Mapping[str, Observed], now: datetime
) -> RolloutWave:
    """Every cluster of the wave is done: bake from now (counting its requests from here), or finish the bake."""
    if wave.bake_started_at is None:
        clusters = [
            c.model_copy(
                update={
                    "requests_at_bake": observed.get(c.name, Observed()).requests,
                    "errors_at_bake": observed.get(c.name, Observed()).errors,
                }
            )
            for c in wave.clusters
        ]
        wave = wave.model_copy(
            update={"clusters": clusters, "bake_started_at": now.isoformat(), "requests": 0, "errors": 0}
        )
    requests, errors = _served_since_bake(wave, observed)
    wave = wave.model_copy(update={"requests": requests, "errors": errors, "state": WaveState.BAKING})
    baked = (now - datetime.fromisoformat(wave.bake_started_at or now.isoformat())).total_seconds()
    if baked >= policy_wave.bake_seconds or not wave.clusters:
        wave = wave.model_copy(update={"state": WaveState.SUCCEEDED})
    return wave


def _served_since_bake(wave: RolloutWave, observed: Mapping[str, Observed]) -> tuple[int, int]:
    """Requests and 5xx answers for the object at the wave's clusters since its bake began. A count lower than
    at the start means the gateway restarted: all it counted since is new."""
    requests = errors = 0
    for cluster in wave.clusters:
        seen = observed.get(cluster.name)
        if seen is None or seen.requests is None:
            continue
        start_requests, start_errors = cluster.requests_at_bake or 0, cluster.errors_at_bake or 0
        if seen.requests < start_requests or (seen.errors or 0) < start_errors:
            start_requests = start_errors = 0
        requests += seen.requests - start_requests
        errors += (seen.errors or 0) - start_errors
    return requests, errors


def _error_ratio_failure(spec: RolloutSpec, wave: RolloutWave, observed: Mapping[str, Observed]) -> str | None:
    fail_on = spec.strategy.fail_on
    if fail_on.error_ratio is None or wave.bake_started_at is None:
        return None
    requests, errors = _served_since_bake(wave, observed)
    if requests < fail_on.min_requests or errors / requests <= fail_on.error_ratio:
        return None
    return (
        f"wave {wave.name} failed: {errors} of {requests} requests answered 5xx "
        f"({errors / requests:.1%}, above {fail_on.error_ratio:.1%})"
    )


def _failed(
    spec: RolloutSpec, waves: list[RolloutWave], index: int, released: set[str], reason: str, now: datetime
) -> RolloutSpec:
    waves[index] = waves[index].model_copy(update={"state": WaveState.FAILED})
    update: dict[str, object] = {"waves": waves, "current_wave": index, "released": sorted(released), "reason": reason}
    if spec.strategy.on_failure is OnFailure.PAUSE:
        return spec.model_copy(update=update | {"phase": Phase.PAUSED})
    return spec.model_copy(update=update | {"phase": Phase.ROLLED_BACK, "finished_at": now.isoformat()})


class RolloutActionRefused(ValueError):
    """An action that does not fit the rollout's phase (a 409 on REST)."""


def pause(spec: RolloutSpec, now: datetime, reason: str = "paused by request") -> RolloutSpec:
    if spec.phase is not Phase.PROGRESSING:
        raise RolloutActionRefused(f"rollout is {spec.phase.value}: only a progressing rollout can be paused")
    return spec.model_copy(update={"phase": Phase.PAUSED, "reason": reason})


def resume(spec: RolloutSpec, now: datetime) -> RolloutSpec:
    """Progress again; a failed wave is judged afresh: its failed clusters wait for a new report and its bake
    starts over."""
    if spec.phase is not Phase.PAUSED:
        raise RolloutActionRefused(f"rollout is {spec.phase.value}: only a paused rollout can be resumed")
    waves = list(spec.waves)
    if spec.current_wave < len(waves):
        wave = waves[spec.current_wave]
        clusters = [
            c.model_copy(update={"state": ClusterState.PENDING, "message": None, "since": now.isoformat()})
            if c.state is ClusterState.FAILED
            else c
            for c in wave.clusters
        ]
        waves[spec.current_wave] = wave.model_copy(
            update={"clusters": clusters, "state": WaveState.PROGRESSING, "bake_started_at": None}
        )
    return spec.model_copy(update={"phase": Phase.PROGRESSING, "reason": "resumed", "waves": waves})


def promote(spec: RolloutSpec, placed: Iterable[str], now: datetime) -> RolloutSpec:
    """Every placed cluster given the change now, gates and bakes skipped."""
    if not spec.phase.active:
        raise RolloutActionRefused(f"rollout is {spec.phase.value}: it is over")
    released = sorted(set(spec.released) | set(placed))
    return spec.model_copy(
        update={
            "released": released,
            "phase": Phase.SUCCEEDED,
            "reason": "promoted: every remaining wave skipped",
            "finished_at": now.isoformat(),
        }
    )


def abort(spec: RolloutSpec, now: datetime) -> RolloutSpec:
    """Stopped; the driver writes the object back to `fromRevision`, as a rollback does."""
    if not spec.phase.active:
        raise RolloutActionRefused(f"rollout is {spec.phase.value}: it is over")
    return spec.model_copy(
        update={"phase": Phase.ABORTED, "reason": "aborted by request", "finished_at": now.isoformat()}
    )


def superseded_by(spec: RolloutSpec, revision: int, now: datetime) -> RolloutSpec:
    return spec.model_copy(
        update={
            "phase": Phase.SUPERSEDED,
            "reason": f"superseded by the write at revision {revision}",
            "finished_at": now.isoformat(),
        }
    )


def revision_for(spec: RolloutSpec, cluster: str) -> int | None:
    """The revision of the object `cluster` serves while the rollout is active (None: none)."""
    if cluster in spec.released:
        return spec.to_revision
    return spec.held.get(cluster, spec.from_revision)
