"""What the store hands out besides objects (see `model.stored`): plain immutable records, free of ORM and pydantic."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from meshplane.model.stored import StoredObject


@dataclass(frozen=True, slots=True)
class Event:
    revision: int
    op: str
    kind: str
    project: str
    name: str
    trace_context: dict[str, Any] | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Delivery:
    """What one cluster last reported doing with one version of one object."""

    cluster: str
    kind: str
    project: str
    name: str
    version: str
    state: str
    message: str
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class TokenRecord:
    """A north-API bearer token as the store keeps it: whom it speaks for and a digest of its secret."""

    id: str
    name: str
    role: str
    project: str | None
    digest: str
    created_at: datetime
    expires_at: datetime | None
    revoked: bool


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One kept version of an object: the change that wrote it, and the object as that change left it (its
    status is not history: `obj.status` is empty)."""

    revision: int
    op: str
    generation: int
    at: datetime
    who: str
    obj: StoredObject


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """Who changed what, when, from where: one per create, update or delete. Never the content written."""

    revision: int
    at: datetime
    who: str
    address: str | None
    request_id: str | None
    trace_id: str | None
    kind: str
    project: str
    name: str
    operation: str
    generation: int


@dataclass(frozen=True, slots=True)
class ApiFigureRecord:
    """One cluster's gateways' figures of one API, cumulative since a point the cluster's agent keeps fixed
    across gateway restarts. `resets` counts the reports that came in lower than the one before (the agent
    restarted and lost what it carried, say): two records of one cluster compare only with equal `resets`."""

    cluster: str
    project: str
    name: str
    requests: int
    errors: int
    by_class: dict[str, int]
    sampled_at: datetime
    resets: int = 0
