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
from meshplane.server.rollout_policies import KnownPolicies, PolicyLookup
from meshplane.store.batch import Companion, Fence, WriteBatch
from meshplane.store.store import Store

ROLLOUT = "Rollout"
POLICY = "RolloutPolicy"


def rollout_key(kind: str, project: str, name: str) -> ObjectKey:
    return (ROLLOUT, project, rollout_name(kind, name))


async def stored_policies(store: Store, project: str) -> KnownPolicies:
    """A project's policies read from the store, for a server that holds none in memory."""
    policies, revision = await store.list(POLICY, project)
    return KnownPolicies([(p.name, RolloutPolicySpec.model_validate(p.spec)) for p in policies], revision)


async def rollout_companion(
    store: Store,
    info: KindInfo,
    project: str | None,
    name: str,
    labels: dict[str, str],
    origin: str | None,
    lookup: PolicyLookup | None = None,
    seen_from: int = 0,
) -> tuple[Companion | None, Fence | None]:
    """What a write of this object commits with: a new Rollout when a policy governs it, and the end of the
    object's active rollout when there is one; and the fence that refuses the write when a policy of its
    project was written after the policies it was weighed against (which include the write at `seen_from`).
    (None, None) when neither can be."""
    if not info.delivered or not info.writable or not project or origin_cluster(origin) is not None:
        return None, None
    known = await lookup(project, seen_from) if lookup is not None else await stored_policies(store, project)
    policy = next(((n, spec) for n, spec in known.policies if spec.selector.governs(info.kind, labels)), None)
    fence = Fence(known.revision, frozenset({POLICY}), lambda other: other.project == project)
    key = rollout_key(info.kind, project, name)
    revisions = await store.content_revision(info.kind, project, name) if policy is not None else None
    target = TargetRef(kind=info.kind, name=name)

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

    return Companion((key,), record), fence


def baseline_revision(current: StoredObject, read: tuple[int, int] | None) -> int:
    """The revision of the version `current` holds, as the history keeps it: the last change of its content
    (`read` before the write, as the object's revision and that one), not a status write after it."""
    if read is not None and read[0] == current.revision:
        return read[1]
    return current.revision
