"""`GET /v1/clusters/{name}/resources`: exactly what one cluster receives, with the versions it is sent."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from meshplane.model.manifests import MANIFEST_TYPE, from_manifest
from meshplane.model.registry import REGISTRY
from meshplane.model.wire import from_message
from meshplane.proto.v1 import resources_pb2
from meshplane.server.problems import Problem
from meshplane.server.projection import FleetProjection
from meshplane.xds.resource import VersionedResource


def delivered_object(type_url: str, packed: VersionedResource) -> dict[str, Any]:
    """A delivered resource as the Kubernetes-shaped object it stands for."""
    if type_url == MANIFEST_TYPE:
        manifest = resources_pb2.Manifest()
        packed.body.Unpack(manifest)
        return from_manifest(manifest)
    info = REGISTRY.by_type_url(type_url)
    message = info.message()  # type: ignore[misc]
    packed.body.Unpack(message)
    return from_message(info, message).to_wire()


def cluster_resources_router(projection: FleetProjection) -> APIRouter:
    router = APIRouter(tags=["Cluster"])

    @router.get("/v1/clusters/{name}/resources", summary="What one cluster receives (its projection)")
    async def cluster_resources(name: str) -> dict[str, Any]:
        if name not in projection.clusters:
            raise Problem(404, f"cluster {name!r} not found")
        items = [
            {
                "typeUrl": type_url,
                "name": resource_name,
                "version": packed.version,
                "object": delivered_object(type_url, packed),
            }
            for type_url, resources in projection.cluster_resources(name).items()
            for resource_name, packed in sorted(resources.items())
        ]
        return {"cluster": name, "items": items}

    return router
