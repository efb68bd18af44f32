"""Which writes roll out, and the Rollout each starts: committed with the change and ahead of it, so that no
reader of the event log (the projection of every replica) ever meets the change without its rollout.

A write of a delivered object in a project, by the control plane, is governed by the first RolloutPolicy of its
project (by name) whose selector takes it. A newer write of an object whose rollout is still active supersedes
that rollout: the new one starts at the first wave, and each cluster keeps what it serves now until its wave
comes. Deletes, credentials (keys and key sets) and what clusters make themselves take effect at once and are
never held back.
"""

from __future__ import annotations

from meshplane.model.meta import origin_cluster
from meshplane.model.registry import KindInfo
from meshplane.model.rollouts import RolloutPolicySpec, RolloutSpec, TargetRef, rollout_name
from meshplane.model.stored import ObjectKey, StoredObject
from meshplane.server.rollout_plan import start, superseded_by
from meshplane.store.batch import Companion, WriteBatch
from meshplane.store.store import Store

ROLLOUT = "Rollout"
POLICY = "RolloutPolicy"


def rollout_key(kind: str, project: str, name: str) -> ObjectKey:
    return (ROLLOUT, project, rollout_name(kind, name))


async def governing_policy(
    store: Store, kind: str, project: str, labels: dict[str, str]
) -> tuple[str, RolloutPolicySpec] | None:
    """The policy a write of this object goes through (the first by name that selects it), if any."""
    policies, _ = await store.list(POLICY, project)
    for policy in policies:
        spec = RolloutPolicySpec.model_validate(policy.spec)
        if spec.selector.governs(kind, labels):
            return policy.name, spec
    return None


async def rollout_companion(
    store: Store, info: KindInfo, project: str | None, name: str, labels: dict[str, str], origin: str | None
) -> Companion | None:
    """What a write of this object commits with: a new Rollout when a policy governs it, and the end of the
    object's active rollout when there is one; None when neither can be."""
    if not info.delivered or not info.writable or not project or origin_cluster(origin) is not None:
        return None
    key = rollout_key(info.kind, project, name)
    policy = await governing_policy(store, info.kind, project, labels)
    if policy is None and not await store.get_many([key]):
        return None
    target = TargetRef(kind=info.kind, name=name)
    revisions = await store.content_revision(info.kind, project, name)

    def record(batch: WriteBatch, current: StoredObject | None) -> None:
        existing = batch.current(*key)
        rollout = existing if existing is not None and not existing.deleted else None
        old = RolloutSpec.model_validate(rollout.spec) if rollout is not None else None
        active = old if old is not None and old.phase.active else None
        if active is not None and rollout is not None:
            change_at = batch.revision + 2 + (policy is not None)
            ended = superseded_by(active, change_at, batch.now).to_wire()
            rollout = batch.record(batch.changed_from(rollout, spec=ended, generation=rollout.generation + 1), "update")
        if policy is None:
            return
        policy_name, strategy = policy
        live = current is not None and not current.deleted
        spec = RolloutSpec(
            target=target,
            policy=policy_name,
            strategy=strategy,
            from_revision=baseline_revision(current, revisions) if live and current is not None else None,
            to_revision=batch.revision + 2,
        )
        wire = start(spec, batch.now, active).to_wire()
        if rollout is None:
            batch.record(batch.born(*key, wire, {}, {}, None), "create")
        else:
            batch.record(batch.changed_from(rollout, spec=wire, generation=rollout.generation + 1), "update")

    return Companion((key,), record)


def baseline_revision(current: StoredObject, read: tuple[int, int] | None) -> int:
    """The revision of the version `current` holds, as the history keeps it: the last change of its content
    (`read` before the write, as the object's revision and that one), not a status write after it."""
    if read is not None and read[0] == current.revision:
        return read[1]
    return current.revision
