"""An object as the store keeps it, and its API view: plain values that pure cores read without the store."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from meshplane.model.registry import KindInfo
from meshplane.model.resource import Resource

ObjectKey = tuple[str, str, str]
"""(kind, project, name): what names an object in the store."""


@dataclass(frozen=True, slots=True)
class StoredObject:
    kind: str
    project: str
    name: str
    uid: str
    revision: int
    generation: int
    origin: str | None
    labels: dict[str, str]
    annotations: dict[str, str]
    spec: dict[str, Any]
    status: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    deleted: bool

    @property
    def key(self) -> ObjectKey:
        return (self.kind, self.project, self.name)


def to_resource(info: KindInfo, stored: StoredObject) -> Resource:
    """The API view of a stored object: metadata filled from the store, status as the system wrote it."""
    metadata: dict[str, Any] = {
        "name": stored.name,
        "labels": stored.labels,
        "annotations": stored.annotations,
        "resourceVersion": str(stored.revision),
        "generation": stored.generation,
        "uid": stored.uid,
        "creationTimestamp": stored.created_at.isoformat(),
    }
    if stored.project:
        metadata["project"] = stored.project
    if stored.origin:
        metadata["origin"] = stored.origin
    return info.model.model_validate(
        {"kind": info.kind, "metadata": metadata, "spec": stored.spec, "status": stored.status}
    )
