"""What the store refuses, as exceptions the API layer maps onto HTTP statuses."""

from __future__ import annotations


class StoreError(Exception):
    """Base of every store refusal, so callers can catch them all at one boundary."""


def _ref(kind: str, project: str, name: str) -> str:
    return f"{kind} {project}/{name}" if project else f"{kind} {name}"


class NotFound(StoreError):
    def __init__(self, kind: str, project: str, name: str) -> None:
        super().__init__(f"{_ref(kind, project, name)} not found")
        self.kind = kind
        self.project = project
        self.name = name


class AlreadyExists(StoreError):
    def __init__(self, kind: str, project: str, name: str) -> None:
        super().__init__(f"{_ref(kind, project, name)} already exists")


class OwnedElsewhere(StoreError):
    """The object was made by another origin (a cluster, or the control plane), which alone may change it."""

    def __init__(self, kind: str, project: str, name: str, *, owner: str | None) -> None:
        made_by = f"was made by {owner}" if owner else "belongs to the control plane"
        super().__init__(f"{_ref(kind, project, name)} {made_by}")
        self.owner = owner


class Conflict(StoreError):
    """The caller's view is stale: it asked to change a revision that is no longer current."""

    def __init__(self, kind: str, project: str, name: str, *, current: int, given: int) -> None:
        super().__init__(f"{_ref(kind, project, name)} is at revision {current}, not {given}")
        self.current = current
        self.given = given


class Overtaken(StoreError):
    """An object the write's checks would have weighed was written after they read the store: check again."""

    def __init__(self, kind: str, project: str, name: str, *, by: tuple[str, str, str], revision: int) -> None:
        super().__init__(f"{_ref(kind, project, name)} was overtaken by a write of {_ref(*by)}")
        self.by = by
        self.revision = revision
        """The revision of the write that overtook it: the checks done again must see at least that one."""


class Compacted(StoreError):
    """The events a consumer asked for are gone; it must take a fresh snapshot."""

    def __init__(self, revision: int, floor: int) -> None:
        super().__init__(f"events after revision {revision} were compacted; the oldest available follow {floor}")
        self.revision = revision
        self.floor = floor
