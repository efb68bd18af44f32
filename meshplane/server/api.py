"""North REST API: routes for every kind of the registry, generated from it."""
# No `from __future__ import annotations`: FastAPI must resolve the per-kind aliases defined in closures.

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, FastAPI, Header, Path, Query, Request, Response
from pydantic import BaseModel, create_model

from meshplane.model.base import WireModel
from meshplane.model.meta import Placement, parse_label_selector
from meshplane.model.registry import REGISTRY, KindInfo
from meshplane.model.resource import API_VERSION, FieldError, Resource
from meshplane.model.roles import Role
from meshplane.server.auth.guard import Caller
from meshplane.server.auth.principal import require_project, require_write
from meshplane.server.objects import ObjectService
from meshplane.server.problems import Problem, ProblemDetail, problem_responses
from meshplane.server.visibility import as_seen_by
from meshplane.server.yaml_bodies import is_yaml, parse_yaml, wants_yaml, yaml_read, yaml_response

SCHEMA_REF = "#/components/schemas/{model}"
IfMatch = Annotated[str | None, Header(alias="If-Match", description="Expected resourceVersion (ETag)")]


def _list_model(info: KindInfo) -> type[BaseModel]:
    return create_model(
        f"{info.kind}List",
        apiVersion=(str, API_VERSION),
        kind=(str, f"{info.kind}List"),
        metadata=(dict[str, str], ...),
        items=(list[info.model], ...),  # type: ignore[name-defined]
    )


def _with_etag(response: Response, resource: Resource) -> Resource:
    response.headers["ETag"] = f'"{resource.metadata.resource_version}"'
    return resource


async def _read_body(request: Request) -> Any:
    """The body as JSON, or as YAML when its Content-Type says so; validation happens in the object service so
    errors carry wire field paths."""
    if is_yaml(request.headers.get("content-type")):
        return parse_yaml(await request.body())
    try:
        return await request.json()
    except ValueError:
        raise Problem(400, "the body is not valid JSON") from None


def _project_dependency(info: KindInfo, writing: bool = False) -> Any:
    """The `{project}` path parameter for project-scoped kinds (None for cluster-scoped ones), once the
    caller may read there, or (`writing`) change this kind there. Another project's objects answer 404."""
    if info.namespaced:

        async def project_of(
            project: Annotated[str, Path(description="The project (tenant)")], principal: Caller
        ) -> str | None:
            if writing:
                require_write(principal, info.kind, project)
            else:
                require_project(principal, project)
            return project

        return Depends(project_of)

    async def no_project(request: Request, principal: Caller) -> str | None:
        if writing:
            require_write(principal, info.kind, None)
        if info.kind == "Project" and "name" in request.path_params:
            require_project(principal, request.path_params["name"])
        return None

    return Depends(no_project)


def _kind_router(info: KindInfo, service: ObjectService) -> APIRouter:
    """Get and list for one kind, at its cluster or project path; the writes too unless only the system writes it."""
    router = APIRouter(tags=[info.kind])
    base = f"/v1/projects/{{project}}/{info.plural}" if info.namespaced else f"/v1/{info.plural}"
    item = f"{base}/{{name}}"
    opts: dict[str, Any] = {"response_model": info.model, "response_model_exclude_none": True}
    Project = Annotated[str | None, _project_dependency(info)]
    if info.writable:
        _write_routes(router, info, service, base, item, opts)
    if info.cluster_made:
        _adopt_route(router, info, service, item, opts)

    @router.get(item, summary=f"Read a {info.kind}", responses=problem_responses(404) | yaml_read(info.kind), **opts)
    async def read(request: Request, response: Response, name: str, project: Project, principal: Caller) -> Any:
        resource = as_seen_by(principal, await service.get(info, project, name))
        if wants_yaml(request):
            return yaml_response(resource)
        response.headers["Vary"] = "Accept"
        return _with_etag(response, resource)

    @router.get(
        base,
        summary=f"List {info.plural}",
        responses=problem_responses(400, 404),
        response_model=_list_model(info),
        response_model_exclude_none=True,
    )
    async def list_(
        project: Project,
        principal: Caller,
        label_selector: Annotated[str | None, Query(alias="labelSelector")] = None,
        limit: Annotated[int | None, Query(ge=1, le=1000)] = None,
        continue_token: Annotated[str | None, Query(alias="continue")] = None,
    ) -> Any:
        try:
            selector = parse_label_selector(label_selector) if label_selector else None
        except ValueError as exc:
            raise Problem(400, str(exc), [FieldError(path="labelSelector", message=str(exc))]) from None
        only = (lambda o: principal.sees(o.name)) if info.kind == "Project" else None
        page = await service.list(info, project, selector, limit, continue_token, only)
        items = [as_seen_by(principal, item) for item in page.items]
        metadata = {"resourceVersion": str(page.revision)}
        if page.continue_token:
            metadata["continue"] = page.continue_token
        return {"apiVersion": API_VERSION, "kind": f"{info.kind}List", "metadata": metadata, "items": items}

    return router


def _write_routes(
    router: APIRouter, info: KindInfo, service: ObjectService, base: str, item: str, opts: dict[str, Any]
) -> None:
    """Create, replace, patch and delete: only for kinds that users write."""
    ref = SCHEMA_REF.format(model=info.kind)
    # The same document is taken as application/yaml (see yaml_bodies); the schema names JSON alone, as the
    # generated clients and the contract fuzzing speak it.
    body = {
        "requestBody": {
            "required": True,
            "description": "The object, as JSON or (Content-Type: application/yaml) as YAML",
            "content": {"application/json": {"schema": {"$ref": ref}}},
        }
    }
    patch_body = {
        "requestBody": {"required": True, "content": {"application/merge-patch+json": {"schema": {"type": "object"}}}}
    }
    writes = problem_responses(403, 404, 409, body=True)
    Project = Annotated[str | None, _project_dependency(info, writing=True)]

    @router.post(base, status_code=201, openapi_extra=body, responses=writes, summary=f"Create a {info.kind}", **opts)
    async def create(request: Request, response: Response, project: Project) -> Resource:
        return _with_etag(response, await service.create(info, project, await _read_body(request)))

    created = {201: {"description": "Created", "content": {"application/json": {"schema": {"$ref": ref}}}}}

    @router.put(
        item, openapi_extra=body, responses=writes | created, summary=f"Create or replace a {info.kind}", **opts
    )
    async def replace(
        request: Request, response: Response, name: str, project: Project, if_match: IfMatch = None
    ) -> Resource:
        resource, created = await service.put(info, project, name, await _read_body(request), if_match)
        response.status_code = 201 if created else 200
        return _with_etag(response, resource)

    @router.patch(item, openapi_extra=patch_body, responses=writes, summary=f"Merge-patch a {info.kind}", **opts)
    async def patch(
        request: Request, response: Response, name: str, project: Project, if_match: IfMatch = None
    ) -> Resource:
        resource = await service.patch(info, project, name, await _read_body(request), if_match)
        return _with_etag(response, resource)

    @router.delete(item, summary=f"Delete a {info.kind}", responses=problem_responses(403, 404, 409), **opts)
    async def delete(name: str, project: Project, if_match: IfMatch = None) -> Resource:
        return await service.delete(info, project, name, if_match)


class AdoptRequest(WireModel):
    placement: Placement | None = None
    """Where the adopted object goes; absent: where its spec asks to go."""


def _adopt_route(router: APIRouter, info: KindInfo, service: ObjectService, item: str, opts: dict[str, Any]) -> None:
    """`POST .../{name}/adopt`: an admin makes an object its cluster made the control plane's."""

    @router.post(
        f"{item}/adopt",
        summary=f"Adopt a {info.kind} a cluster made: it becomes the control plane's, with a placement",
        responses=problem_responses(403, 404, 409, body=True),
        **opts,
    )
    async def adopt(
        response: Response,
        name: str,
        project: Annotated[str | None, _project_dependency(info)],
        principal: Caller,
        body: Annotated[AdoptRequest | None, Body()] = None,
    ) -> Resource:
        if principal.role is not Role.ADMIN:
            raise Problem(403, f"only an admin may adopt a {info.kind} a cluster made")
        placement = body.placement if body is not None else None
        return _with_etag(response, await service.adopt(info, project, name, placement))


def install_object_routes(app: FastAPI, service: ObjectService) -> None:
    for info in REGISTRY:
        if info.exposed:
            app.include_router(_kind_router(info, service))
    _document_components(app)


def _document_components(app: FastAPI) -> None:
    """Register the schemas that raw-JSON bodies and problem responses refer to."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = generate()
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for name, model in [
            ("ProblemDetail", ProblemDetail),
            *((info.kind, info.model) for info in REGISTRY if info.exposed),
        ]:
            model_schema = model.model_json_schema(ref_template=SCHEMA_REF)
            # Nested models become components of their own, where the template's references point.
            for nested, sub in model_schema.pop("$defs", {}).items():
                components.setdefault(nested, sub)
            components.setdefault(name, model_schema)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
