"""Validated resources and their stored rows, for unit tests of checks that read the store."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from meshplane.model.registry import REGISTRY
from meshplane.model.resource import Resource
from meshplane.model.stored import StoredObject
from meshplane_testing import documents


def resource(kind: str, name: str, spec: dict[str, Any], project: str = "shop") -> Resource:
    return REGISTRY.parse(documents.document(kind, name, project=project, spec=spec))


def stored(resource: Resource) -> StoredObject:
    meta, at = resource.metadata, datetime.now(UTC)
    return StoredObject(
        kind=resource.kind,
        project=meta.project or "",
        name=meta.name,
        uid="uid",
        revision=1,
        generation=1,
        origin=None,
        labels={},
        annotations={},
        spec=resource.spec.to_wire(),
        status={},
        created_at=at,
        updated_at=at,
        deleted=False,
    )
