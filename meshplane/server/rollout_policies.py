"""Every project's rollout policies as the projection feeder last read them. A write finds the policy that
governs it here instead of reading the store; the fence it commits with refuses it when a policy of its project
was written after that reading (see `rollout_writes`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import NamedTuple

from meshplane.model.rollouts import RolloutPolicySpec
from meshplane.model.stored import ObjectKey, StoredObject


class KnownPolicies(NamedTuple):
    """A project's policies (name, spec), by name, as of `revision`."""

    policies: list[tuple[str, RolloutPolicySpec]]
    revision: int


PolicyLookup = Callable[[str, int], Awaitable[KnownPolicies]]
"""A project's policies as a server holds them, as of a revision at least the given one; without one, the
store is read."""


class RolloutPolicies:
    """Policies by project, each spec parsed once, when it is read."""

    def __init__(self) -> None:
        self._by_project: dict[str, dict[str, RolloutPolicySpec]] = {}

    def reset(self, stored: Iterable[StoredObject]) -> None:
        self._by_project = {}
        for obj in stored:
            self.upsert(obj)

    def upsert(self, stored: StoredObject) -> None:
        self._by_project.setdefault(stored.project, {})[stored.name] = RolloutPolicySpec.model_validate(stored.spec)

    def remove(self, key: ObjectKey) -> None:
        _, project, name = key
        held = self._by_project.get(project, {})
        held.pop(name, None)
        if not held:
            self._by_project.pop(project, None)

    def of(self, project: str) -> list[tuple[str, RolloutPolicySpec]]:
        return sorted(self._by_project.get(project, {}).items())
