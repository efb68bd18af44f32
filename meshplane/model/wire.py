"""Conversion between validated resources and the proto messages delivered to agents."""

from __future__ import annotations

import math
from typing import Any

from google.protobuf import struct_pb2
from google.protobuf.message import Message

from meshplane.model.registry import REGISTRY, KindInfo
from meshplane.model.resource import Resource
from meshplane.proto.v1 import resources_pb2


def resource_name(project: str | None, name: str) -> str:
    """The xDS resource name of an object: `project/name`, or `name` when cluster-scoped."""
    return f"{project}/{name}" if project else name


def to_message(info: KindInfo, resource: Resource, context: dict[str, Any] | None = None) -> Message:
    """The delivered form of an object: its identity, labels and validated spec; no status. `context`: how
    the spec is serialized (see `model.sealed`)."""
    if info.message is None:
        raise ValueError(f"{info.kind} is not delivered to clusters")
    meta = resource.metadata
    spec = struct_pb2.Struct()
    spec.update(resource.spec.to_wire(context))
    return info.message(
        metadata=resources_pb2.ObjectMeta(
            name=meta.name,
            project=meta.project or "",
            labels=meta.labels,
            annotations=meta.annotations,
            generation=meta.generation or 0,
            uid=meta.uid or "",
            origin=meta.origin or "",
        ),
        spec=spec,
    )


def from_message(info: KindInfo, message: Message) -> Resource:
    """Validate a delivered message back into its kind's model (raises InvalidObject)."""
    meta = message.metadata  # type: ignore[attr-defined]
    metadata: dict = {
        "name": meta.name,
        "labels": dict(meta.labels),
        "annotations": dict(meta.annotations),
    }
    if meta.project:
        metadata["project"] = meta.project
    for key, value in (("generation", meta.generation), ("uid", meta.uid), ("origin", meta.origin)):
        if value:
            metadata[key] = value
    spec = plain_struct(message.spec)  # type: ignore[attr-defined]
    return REGISTRY.parse({"kind": info.kind, "metadata": metadata, "spec": spec})


def plain_struct(struct: struct_pb2.Struct) -> dict[str, Any]:
    """A Struct as plain JSON values, whole numbers as ints (Struct carries every number as a double): what
    `integral(MessageToDict(struct))` gives, read straight off the message."""
    return {key: _plain_value(value) for key, value in struct.fields.items()}


def _plain_value(value: struct_pb2.Value) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        return plain_struct(value.struct_value)
    if kind == "list_value":
        return [_plain_value(item) for item in value.list_value.values]
    if kind == "number_value":
        number = value.number_value
        if not math.isfinite(number):
            raise ValueError(f"{number} is not a JSON number")
        return int(number) if number.is_integer() else number
    if kind is None or kind == "null_value":
        return None
    return getattr(value, kind)


def integral(value: object) -> object:
    """Struct carries every number as a double; give whole numbers back as ints."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [integral(v) for v in value]
    return value
