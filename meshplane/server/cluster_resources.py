"""`GET /v1/clusters/{name}/resources`: exactly what one cluster receives, with the versions it is sent."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import yaml
from fastapi import APIRouter, Query, Response

from meshplane.model.access import readable
from meshplane.model.manifests import MANIFEST_TYPE, from_manifest
from meshplane.model.registry import REGISTRY
from meshplane.model.wire import from_message
from meshplane.proto.v1 import resources_pb2
from meshplane.server.auth.guard import Caller
from meshplane.server.auth.principal import require_fleet_wide
from meshplane.server.problems import Problem, problem_responses
from meshplane.server.projection import FleetProjection
from meshplane.xds.resource import VersionedResource


def delivered_object(type_url: str, packed: VersionedResource) -> dict[str, Any]:
    """A delivered resource as the Kubernetes-shaped object it stands for, as reads show it (see `readable`)."""
    if type_url == MANIFEST_TYPE:
        manifest = resources_pb2.Manifest()
        packed.body.Unpack(manifest)
        return from_manifest(manifest)
    info = REGISTRY.by_type_url(type_url)
    message = info.message()  # type: ignore[misc]
    packed.body.Unpack(message)
    return readable(from_message(info, message).to_wire())


def _render_order(obj: dict[str, Any]) -> tuple[bool, str, str, str]:
    meta = obj["metadata"]
    rendered = not obj["apiVersion"].startswith("meshplane.io/")
    return rendered, obj["kind"], meta.get("namespace", meta.get("project", "")), meta["name"]


def cluster_resources_router(projection: FleetProjection) -> APIRouter:
    router = APIRouter(tags=["Cluster"])

    @router.get(
        "/v1/clusters/{name}/resources",
        summary="What one cluster receives (its projection)",
        responses={200: {"content": {"application/yaml": {}}}, **problem_responses(403, 404)},
    )
    async def cluster_resources(
        name: str,
        principal: Caller,
        output: Annotated[Literal["json", "yaml"], Query(description="yaml: the objects, ready for kubectl")] = "json",
    ) -> Any:
        require_fleet_wide(principal, "a cluster's partition")
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
        if output == "yaml":
            # The order `meshplane render` prints: delivered objects, then rendered ones by kind, namespace, name.
            objects = sorted((item["object"] for item in items), key=_render_order)
            text = yaml.safe_dump_all(objects, sort_keys=False)
            return Response(text, media_type="application/yaml")
        return {"cluster": name, "items": items}

    return router
