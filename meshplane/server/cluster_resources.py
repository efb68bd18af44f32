"""`GET /v1/clusters/{name}/resources`: exactly what one cluster receives, with the versions it is sent."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from meshplane.model.registry import REGISTRY
from meshplane.model.wire import from_message
from meshplane.server.problems import Problem
from meshplane.server.projection import FleetProjection


def cluster_resources_router(projection: FleetProjection) -> APIRouter:
    router = APIRouter(tags=["Cluster"])

    @router.get("/v1/clusters/{name}/resources", summary="What one cluster receives (its projection)")
    async def cluster_resources(name: str) -> dict[str, Any]:
        if name not in projection.clusters:
            raise Problem(404, f"cluster {name!r} not found")
        items = []
        for type_url, resources in projection.cluster_resources(name).items():
            info = REGISTRY.by_type_url(type_url)
            for resource_name, packed in sorted(resources.items()):
                message = info.message()  # type: ignore[misc]
                packed.body.Unpack(message)
                items.append(
                    {
                        "typeUrl": type_url,
                        "name": resource_name,
                        "version": packed.version,
                        "object": from_message(info, message).to_wire(),
                    }
                )
        return {"cluster": name, "items": items}

    return router
