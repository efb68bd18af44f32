"""What the store hands out besides objects (see `model.stored`): plain immutable records, free of ORM and pydantic."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


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
