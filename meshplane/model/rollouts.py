"""Rollouts: how a change to a governed object travels through the fleet, wave by wave.

A RolloutPolicy says which objects it governs, in which waves of clusters their changes travel, how long each
wave bakes and what fails it. A Rollout is one change on its way: written by the server only, and read by the
projection, which serves every cluster the version its wave has reached (see `server.rollout_plan`).
"""

from __future__ import annotations

import hashlib
from enum import StrEnum

from pydantic import Field, model_validator

from meshplane.model.base import WireModel
from meshplane.model.durations import Duration, duration_seconds
from meshplane.model.meta import LabelSelector, Name, SelectorRequirement


class RolloutSelector(WireModel):
    """The objects a policy governs: of `kinds` (none: every kind users write and clusters receive) whose labels
    match."""

    kinds: list[str] = Field(default_factory=list)
    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: list[SelectorRequirement] = Field(default_factory=list)

    def governs(self, kind: str, labels: dict[str, str]) -> bool:
        if self.kinds and kind not in self.kinds:
            return False
        return LabelSelector(match_labels=self.match_labels, match_expressions=self.match_expressions).matches(labels)


class Wave(WireModel):
    """Clusters that take a change together. Named clusters and selected ones add up; a wave with neither takes
    every placed cluster no other wave selects (the rest)."""

    name: Name
    clusters: list[Name] = Field(default_factory=list)
    cluster_selector: LabelSelector | None = None
    max_concurrent: int | None = Field(default=None, ge=1)
    """Clusters of the wave given the change at a time (none: all at once)."""
    bake: Duration = "0s"
    """How long the wave serves the change, every cluster of it applied, before the next wave starts."""

    @property
    def is_rest(self) -> bool:
        return not self.clusters and self.cluster_selector is None

    def selects(self, cluster: str, labels: dict[str, str]) -> bool:
        if cluster in self.clusters:
            return True
        return self.cluster_selector is not None and self.cluster_selector.matches(labels)

    @property
    def bake_seconds(self) -> float:
        return duration_seconds(self.bake)


class FailOn(WireModel):
    """What fails a wave: a gateway refusing the change (NACK) or failing to apply it, and a share of 5xx answers
    among the requests for the object at the wave's gateways over its bake, once there are `minRequests`."""

    nack: bool = True
    error_ratio: float | None = Field(default=None, ge=0.0, le=1.0)
    min_requests: int = Field(default=50, ge=1)


class OnFailure(StrEnum):
    ROLLBACK = "Rollback"
    PAUSE = "Pause"


class Offline(StrEnum):
    SKIP = "Skip"
    """A wave does not wait for a cluster that is not connected; it gets the change when it connects."""
    WAIT = "Wait"
    """A wave waits until its disconnected clusters connect and apply the change."""


class RolloutPolicySpec(WireModel):
    selector: RolloutSelector = Field(default_factory=RolloutSelector)
    waves: list[Wave] = Field(min_length=1, max_length=50)
    fail_on: FailOn = Field(default_factory=FailOn)
    on_failure: OnFailure = OnFailure.ROLLBACK
    offline: Offline = Offline.SKIP

    def field_problems(self) -> list[tuple[str, str]]:
        """Kinds a policy may govern are those users write and clusters receive: nothing else travels to
        clusters, and credentials (keys, key sets) take effect everywhere at once."""
        from meshplane.model.registry import REGISTRY  # the registry holds this kind: imported when it is built

        governed = sorted(info.kind for info in REGISTRY.delivered() if info.writable)
        return [
            (f"selector.kinds[{i}]", f"{kind!r} is not a kind rollouts govern; one of {', '.join(governed)}")
            for i, kind in enumerate(self.selector.kinds)
            if kind not in governed
        ]

    @model_validator(mode="after")
    def _distinct_wave_names(self) -> RolloutPolicySpec:
        names = [wave.name for wave in self.waves]
        if len(set(names)) != len(names):
            raise ValueError("wave names must be distinct")
        return self


class Phase(StrEnum):
    PROGRESSING = "Progressing"
    PAUSED = "Paused"
    SUCCEEDED = "Succeeded"
    ROLLED_BACK = "RolledBack"
    ABORTED = "Aborted"
    SUPERSEDED = "Superseded"
    """A newer write of the object started a rollout of its own, from where this one left each cluster."""

    @property
    def active(self) -> bool:
        """While a rollout is active, clusters its waves have not reached keep the version they had."""
        return self in (Phase.PROGRESSING, Phase.PAUSED)


class WaveState(StrEnum):
    WAITING = "Waiting"
    PROGRESSING = "Progressing"
    BAKING = "Baking"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class ClusterState(StrEnum):
    WAITING = "Waiting"
    """Not given the change yet: it serves the version it had."""
    PENDING = "Pending"
    """Given the change; its gateways have not acknowledged it yet."""
    APPLIED = "Applied"
    FAILED = "Failed"
    SKIPPED = "Skipped"
    """Not connected when its wave came (offline: Skip): it takes the change when it connects."""


class TargetRef(WireModel):
    kind: str
    name: Name


class RolloutCluster(WireModel):
    name: Name
    state: ClusterState = ClusterState.WAITING
    message: str | None = None
    since: str | None = None
    requests_at_bake: int | None = None
    """The object's request and 5xx counts at this cluster when its wave started baking: the error ratio is
    counted from there."""
    errors_at_bake: int | None = None


class RolloutWave(WireModel):
    name: Name
    state: WaveState = WaveState.WAITING
    clusters: list[RolloutCluster] = Field(default_factory=list)
    bake_started_at: str | None = None
    requests: int | None = None
    """Requests for the object at the wave's gateways since its bake started, and how many were answered 5xx."""
    errors: int | None = None


class RolloutSpec(WireModel):
    """One change's journey; every field is the server's (the kind is read-only)."""

    target: TargetRef
    policy: Name
    strategy: RolloutPolicySpec
    """The policy as it was when the change was written: editing a policy changes the rollouts that follow."""
    from_revision: int | None = None
    """The revision clusters not reached yet keep serving; None when the change made the object."""
    to_revision: int
    held: dict[str, int | None] = Field(default_factory=dict)
    """Clusters that keep another revision than `fromRevision` until their wave comes (None: none at all): where a
    rollout this one superseded had already taken them."""
    released: list[Name] = Field(default_factory=list)
    """The clusters given `toRevision`."""
    waves: list[RolloutWave] = Field(default_factory=list)
    current_wave: int = 0
    phase: Phase = Phase.PROGRESSING
    reason: str = ""
    started_at: str | None = None
    finished_at: str | None = None


ROLLOUT_NAME_LIMIT = 63


def rollout_name(kind: str, name: str) -> str:
    """The one Rollout of an object: each change of it rewrites it (its history keeps the earlier ones)."""
    plain = f"{kind.lower()}-{name}"
    if len(plain) <= ROLLOUT_NAME_LIMIT:
        return plain
    digest = hashlib.sha256(plain.encode()).hexdigest()[:8]
    return f"{plain[: ROLLOUT_NAME_LIMIT - 9].rstrip('-')}-{digest}"
