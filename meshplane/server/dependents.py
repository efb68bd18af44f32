"""`GET …/{name}/dependents`: what names an object, and so what deleting it would meet: the objects whose spec
names it by a registry reference (`REGISTRY.referencing`), each with what a delete does to it (`refuse`: the delete
is refused while it is there; `cascade`: it goes with the object). Shown before a delete, so that a user confirms
knowing what depends on the object, as the delete itself will judge it."""
# No `from __future__ import annotations`: FastAPI must resolve the per-kind aliases defined in closures.

from typing import Annotated, Any

from fastapi import APIRouter, FastAPI
from pydantic import BaseModel, Field

from meshplane.model.base import WireModel
from meshplane.model.registry import REGISTRY, KindInfo, OnDelete
from meshplane.model.resource import API_VERSION
from meshplane.server.api import _project_dependency
from meshplane.server.objects import ObjectService
from meshplane.server.problems import problem_responses


class Dependent(WireModel):
    kind: str
    name: str
    field: str
    """The spec field of the dependent that names the object (`spec.api`)."""
    on_delete: OnDelete


class DependentList(BaseModel):
    api_version: str = Field(API_VERSION, alias="apiVersion")
    kind: str = "DependentList"
    metadata: dict[str, str]
    items: list[Dependent]


async def dependents(service: ObjectService, info: KindInfo, project: str, name: str) -> list[Dependent]:
    """The objects of `project` whose spec names `name`, an object of `info`'s kind, by a reference."""
    found = []
    for holder, reference in REGISTRY.referencing(info.kind):
        field = reference.field
        holders, _ = await service.store.list(
            holder.kind, project, where=lambda other, field=field: other.spec.get(field) == name
        )
        found += [
            Dependent(kind=holder.kind, name=other.name, field=reference.path, on_delete=reference.on_delete)
            for other in holders
        ]
    return found


def _dependents_router(info: KindInfo, service: ObjectService) -> APIRouter:
    router = APIRouter(tags=[info.kind])
    Project = Annotated[str | None, _project_dependency(info)]

    @router.get(
        f"/v1/projects/{{project}}/{info.plural}/{{name}}/dependents",
        summary=f"What names a {info.kind}, and what deleting it does to each",
        response_model=DependentList,
        responses=problem_responses(404),
    )
    async def listed(name: str, project: Project) -> dict[str, Any]:
        await service.get(info, project, name)
        items = await dependents(service, info, project or "", name)
        metadata = {"name": name, "project": project or ""}
        return {"apiVersion": API_VERSION, "kind": "DependentList", "metadata": metadata, "items": items}

    return router


def install_dependents_routes(app: FastAPI, service: ObjectService) -> None:
    """For every project-scoped kind users write, and so delete (references name objects of the same project)."""
    for info in REGISTRY:
        if info.exposed and info.namespaced and info.writable:
            app.include_router(_dependents_router(info, service))
