"""History and audit reads: every kept version of an object, and who changed what, when, from where.

A version is shown as a read shows the object (write-only values as their digest, never the value), to
whoever may read the object; a deleted object's past stays readable. The audit trail is read by every role,
a project-bound token seeing its own project's entries alone (never the fleet-wide objects' ones).
"""
# No `from __future__ import annotations`: FastAPI must resolve the per-kind aliases defined in closures.

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Path, Query, Request, Response
from pydantic import BaseModel, Field

from meshplane.model.base import WireModel
from meshplane.model.registry import REGISTRY, KindInfo, UnknownKind
from meshplane.model.resource import API_VERSION, FieldError
from meshplane.model.stored import to_resource
from meshplane.server.api import _project_dependency
from meshplane.server.auth.guard import Caller
from meshplane.server.auth.principal import require_project
from meshplane.server.continuation import ContinueTokens
from meshplane.server.problems import Problem, problem_responses
from meshplane.server.visibility import as_seen_by
from meshplane.server.yaml_bodies import wants_yaml, yaml_read, yaml_response
from meshplane.store.store import Store

MAX_AUDIT_PAGE = 1000
MAX_REVISION = 2**63 - 1
"""The largest revision a store column holds: a larger one is no revision, not a server error."""


class Revision(WireModel):
    revision: int
    op: str
    generation: int
    at: datetime
    who: str


class HistoryList(BaseModel):
    api_version: str = Field(API_VERSION, alias="apiVersion")
    kind: str
    metadata: dict[str, str]
    items: list[Revision]


class AuditRecord(WireModel):
    revision: int
    at: datetime
    who: str
    address: str | None = None
    request_id: str | None = None
    trace_id: str | None = None
    kind: str
    project: str | None = None
    name: str
    operation: str
    generation: int


class AuditList(BaseModel):
    api_version: str = Field(API_VERSION, alias="apiVersion")
    kind: str = "AuditList"
    metadata: dict[str, str]
    items: list[AuditRecord]


def _no_history(info: KindInfo, project: str | None, name: str, revision: int | None = None) -> Problem:
    where = f" in project {project!r}" if project else ""
    at = f" at revision {revision}" if revision is not None else ""
    return Problem(404, f"no history of {info.kind} {name!r}{where}{at}")


def _history_router(info: KindInfo, store: Store) -> APIRouter:
    router = APIRouter(tags=[info.kind])
    base = f"/v1/projects/{{project}}/{info.plural}" if info.namespaced else f"/v1/{info.plural}"
    item = f"{base}/{{name}}/history"
    Project = Annotated[str | None, _project_dependency(info)]

    @router.get(
        item,
        summary=f"The kept versions of a {info.kind}, newest first",
        response_model=HistoryList,
        responses=problem_responses(404),
    )
    async def history(
        name: str, project: Project, limit: Annotated[int | None, Query(ge=1, le=1000)] = None
    ) -> dict[str, Any]:
        entries = await store.history(info.kind, project or "", name, limit=limit)
        if not entries:
            raise _no_history(info, project, name)
        metadata = {"name": name, **({"project": project} if project else {})}
        items = [Revision(revision=e.revision, op=e.op, generation=e.generation, at=e.at, who=e.who) for e in entries]
        return {"apiVersion": API_VERSION, "kind": f"{info.kind}History", "metadata": metadata, "items": items}

    @router.get(
        f"{item}/{{revision}}",
        summary=f"A {info.kind} as the change at one revision wrote it",
        response_model=info.model,
        response_model_exclude_none=True,
        responses=problem_responses(404) | yaml_read(info.kind),
    )
    async def version(
        request: Request,
        response: Response,
        name: str,
        revision: Annotated[int, Path(ge=1, le=MAX_REVISION)],
        project: Project,
        principal: Caller,
    ) -> Any:
        found = await store.version_at(info.kind, project or "", name, revision)
        if found is None:
            raise _no_history(info, project, name, revision)
        resource = as_seen_by(principal, to_resource(info, found))
        if wants_yaml(request):
            return yaml_response(resource)
        response.headers["ETag"] = f'"{resource.metadata.resource_version}"'
        return resource

    return router


def _since(text: str | None) -> datetime | None:
    """An RFC 3339 / ISO 8601 time (UTC when it names no offset); 422 for anything else."""
    if text is None:
        return None
    try:
        parsed = datetime.fromisoformat(text)
        return (parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)).astimezone(UTC)
    except (ValueError, OverflowError):
        message = "not an ISO 8601 time (e.g. 2026-01-31T12:00:00Z)"
        raise Problem(422, f"since: {text!r} is {message}", [FieldError(path="since", message=message)]) from None


def _kind(word: str | None) -> str | None:
    if word is None:
        return None
    try:
        return REGISTRY.resolve(word).kind
    except UnknownKind as exc:
        raise Problem(422, str(exc), [FieldError(path="kind", message="not a kind")]) from None


def audit_router(store: Store) -> APIRouter:
    router = APIRouter(tags=["Audit"])
    continue_tokens = ContinueTokens(store)

    @router.get(
        "/v1/audit",
        summary="Who changed what, when and from where, newest first",
        response_model=AuditList,
        response_model_exclude_none=True,
        responses=problem_responses(400, 404),
    )
    async def audit(
        principal: Caller,
        since: Annotated[str | None, Query(description="only changes at or after this time (ISO 8601)")] = None,
        project: Annotated[str | None, Query()] = None,
        kind: Annotated[str | None, Query()] = None,
        who: Annotated[str | None, Query(description="token/<name>, oidc/<subject>, cluster/<name>, ...")] = None,
        name: Annotated[str | None, Query(description="only changes of objects of this name")] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_AUDIT_PAGE)] = 100,
        continue_token: Annotated[str | None, Query(alias="continue")] = None,
    ) -> dict[str, Any]:
        if project is not None:
            require_project(principal, project)
        project = project if principal.fleet_wide else principal.project
        filters = {"since": _since(since), "project": project, "kind": _kind(kind), "who": who, "name": name}
        scope = f"audit/{since}/{project}/{filters['kind']}/{who}/{name}"
        after = int((await continue_tokens.open(scope, continue_token))[0]) if continue_token else None
        entries = await store.audit(**filters, limit=limit + 1, after=after)
        metadata: dict[str, str] = {}
        if len(entries) > limit:
            entries = entries[:limit]
            metadata["continue"] = await continue_tokens.seal(scope, (str(entries[-1].revision), ""))
        items = [
            AuditRecord(
                revision=e.revision,
                at=e.at,
                who=e.who,
                address=e.address,
                request_id=e.request_id,
                trace_id=e.trace_id,
                kind=e.kind,
                project=e.project or None,
                name=e.name,
                operation=e.operation,
                generation=e.generation,
            )
            for e in entries
        ]
        return {"apiVersion": API_VERSION, "kind": "AuditList", "metadata": metadata, "items": items}

    return router


def install_history_routes(app: FastAPI, store: Store) -> None:
    for info in REGISTRY:
        if info.exposed:
            app.include_router(_history_router(info, store))
    app.include_router(audit_router(store))
