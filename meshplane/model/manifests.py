"""Rendered Kubernetes objects as they travel to agents: the `Manifest` message and its name."""

from __future__ import annotations

from typing import Any

from google.protobuf import struct_pb2

from meshplane.model.registry import REGISTRY
from meshplane.model.wire import plain_struct
from meshplane.proto.v1 import resources_pb2

MANIFEST_TYPE = f"type.googleapis.com/{resources_pb2.Manifest.DESCRIPTOR.full_name}"
DELIVERED_TYPE_URLS = [*(info.type_url for info in REGISTRY.delivered()), MANIFEST_TYPE]
"""Every type URL the server delivers to agents: objects of delivered kinds, and rendered manifests."""


def manifest_name(obj: dict[str, Any]) -> str:
    """`<namespace>/<kind>/<name>`: unique within one cluster's set of rendered objects."""
    meta = obj["metadata"]
    return f"{meta.get('namespace', '')}/{obj['kind']}/{meta['name']}"


def to_manifest(obj: dict[str, Any]) -> resources_pb2.Manifest:
    meta = obj["metadata"]
    spec = struct_pb2.Struct()
    spec.update(obj.get("spec", {}))
    return resources_pb2.Manifest(
        api_version=obj["apiVersion"],
        kind=obj["kind"],
        namespace=meta.get("namespace", ""),
        name=meta["name"],
        labels=meta.get("labels", {}),
        annotations=meta.get("annotations", {}),
        spec=spec,
    )


def from_manifest(message: resources_pb2.Manifest) -> dict[str, Any]:
    """The Kubernetes object again, as a user could `kubectl apply` it."""
    metadata: dict[str, Any] = {"name": message.name}
    if message.namespace:
        metadata["namespace"] = message.namespace
    if message.labels:
        metadata["labels"] = dict(sorted(message.labels.items()))
    if message.annotations:
        metadata["annotations"] = dict(sorted(message.annotations.items()))
    return {
        "apiVersion": message.api_version,
        "kind": message.kind,
        "metadata": metadata,
        "spec": plain_struct(message.spec),
    }
