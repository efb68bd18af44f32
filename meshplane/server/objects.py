"""The object service: validation, project checks and optimistic concurrency over the store.

REST handlers and the agent-facing services both write through here, so every write is validated
the same way whichever door it came in by.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from opentelemetry.trace import Span

from meshplane.model.meta import LabelSelector, Placement, origin_cluster
from meshplane.model.registry import REGISTRY, KindInfo
from meshplane.model.resource import FieldError, InvalidObject, Resource
from meshplane.model.sealed import sealed_values
from meshplane.model.stored import StoredObject, to_resource
from meshplane.observability.tracing import current_carrier, tracer
from meshplane.server.access_checks import ApiLookup, check_access, collides_with_access_checks
from meshplane.server.continuation import ContinueTokens
from meshplane.server.intent_checks import check_intent, collides_with_intent_claims
from meshplane.server.problems import Problem
from meshplane.server.references import (
    check_references,
    delete_dependents,
    missing_reference,
    referenced,
    refuse_referenced,
)
from meshplane.server.rollout_policies import PolicyLookup
from meshplane.server.rollout_writes import rollout_companion
from meshplane.server.sealing import STORED, Sealer
from meshplane.server.service_endpoints import rehome
from meshplane.server.tls_checks import check_certificate_dates
from meshplane.store.batch import Companion, Fence, joined
from meshplane.store.errors import Conflict, NotFound, Overtaken, OwnedElsewhere
from meshplane.store.store import Store

MAX_PAGE = 1000


def parse_revision(text: str | None, path: str = "metadata.resourceVersion") -> int | None:
    """An expected revision from a resourceVersion or an If-Match / ETag value (`"12"`, `W/"12"`)."""
    if text is None or text == "":
        return None
    cleaned = text.removeprefix("W/").strip('"')
    if not cleaned.isdigit():
        raise Problem(422, f"{text!r} is not a resource version", [FieldError(path=path, message="not a number")])
    return int(cleaned)


@dataclass(frozen=True)
class Page:
    items: list[Resource]
    revision: int
    continue_token: str | None


def _write_span(info: KindInfo, op: str, project: str | None, name: str | None) -> AbstractContextManager[Span]:
    """The span of one write, whichever door it came in by. The store keeps its context with the write's
    event, so the pushes of this change join its trace however late they happen."""
    attributes = {"meshplane.kind": info.kind, "meshplane.op": op}
    if project:
        attributes["meshplane.project"] = project
    if name:
        attributes["meshplane.name"] = name
    return tracer().start_as_current_span(f"meshplane.write {info.kind}", attributes=attributes)


def _written(resource: Resource, project: str | None) -> dict[str, Any]:
    """What a create or a put stores of a resource, with the trace its write belongs to, and the project and
    the objects it names that must be live when it commits."""
    meta = resource.metadata
    within = (("Project", "", project),) if project is not None else ()
    return {
        "spec": resource.spec.to_wire(context=STORED),
        "labels": meta.labels,
        "annotations": meta.annotations,
        "origin": meta.origin,
        "trace_context": current_carrier(),
        "within": within + referenced(resource),
    }


@contextmanager
def _owned_here(origin: str | None) -> Iterator[None]:
    """A control-plane write refused because a cluster made the object says how to make it the control plane's."""
    try:
        yield
    except OwnedElsewhere as exc:
        if origin is None and origin_cluster(exc.owner) is not None:
            raise Problem(409, f"{exc}; an admin who adopts it (meshplane adopt) can change it here") from None
        raise


def _missing_project(project: str) -> Problem:
    return Problem(404, f"project {project!r} not found")


@contextmanager
def _in_project(project: str | None, resource: Resource) -> Iterator[None]:
    """A write refused because its project is not there answers as a request to a missing project does; one
    refused because an object it names went meanwhile, as its check would have."""
    try:
        yield
    except NotFound as exc:
        if project is not None and (exc.kind, exc.name) == ("Project", project):
            raise _missing_project(project) from None
        if (refused := missing_reference(resource, exc)) is not None:
            raise refused from None
        raise


_T = TypeVar("_T")
_C = TypeVar("_C")

_USER_KINDS_IN_PROJECTS = [info for info in REGISTRY if info.namespaced and (info.writable or info.cluster_made)]
"""What a project must not hold when it is deleted: what users wrote, and what clusters made (a route a cluster
shows there is gone from it only when the cluster deletes it)."""

CHECK_ATTEMPTS = 5
"""Times a write is checked again after writes it had to be weighed against overtook it, before it gives up."""


def _fence(resource: Resource, seen: list[int | None]) -> Fence | None:
    """The fence of a write whose checks weighed the other objects of its kind as of the oldest `seen` revision."""
    revisions = [revision for revision in seen if revision is not None]
    if not revisions:
        return None

    def collides(other: StoredObject) -> bool:
        return collides_with_access_checks(resource, other) or collides_with_intent_claims(resource, other)

    return Fence(min(revisions), frozenset({resource.kind}), collides)


async def fenced(check: Callable[[int], Awaitable[_C]], write: Callable[[_C], Awaitable[_T]], what: str) -> _T:
    """`write` once `check` passes, with what it returns (the fence), so that the write commits only if nothing
    checked changed meanwhile (concurrent writes, here or on another server); if something did, it is checked
    again, told the revision of what overtook it (0 the first time) so that what it reads includes that."""
    seen_from = 0
    for _ in range(CHECK_ATTEMPTS):
        checked = await check(seen_from)
        try:
            return await write(checked)
        except Overtaken as exc:
            seen_from = exc.revision
    raise Problem(409, f"{what}: what it is checked against kept changing; retry")


class ObjectService:
    def __init__(
        self,
        store: Store,
        api_lookup: ApiLookup | None = None,
        sealer: Sealer | None = None,
        policy_lookup: PolicyLookup | None = None,
    ):
        self.store = store
        self.api_lookup = api_lookup
        self.policy_lookup = policy_lookup
        self.sealer = sealer
        """Seals write-only fields; without one, a write that carries such a value is refused."""
        self.continue_tokens = ContinueTokens(store)

    async def _sealed(self, info: KindInfo, resource: Resource) -> Resource:
        """`resource` with its write-only values encrypted (or, given back as their digest, kept as stored)."""
        if not any(True for _ in sealed_values(resource.spec)):
            return resource
        if self.sealer is None:
            raise Problem(503, f"{info.kind}: this server has no data key to seal write-only fields with")
        meta = resource.metadata
        key = (info.kind, meta.project or "", meta.name)
        try:
            previous = info.spec.model_validate((await self.store.get(*key)).spec)
        except NotFound:
            previous = None
        return resource.model_copy(update={"spec": self.sealer.seal(key, resource.spec, previous)})

    async def require_project(self, project: str) -> None:
        try:
            await self.store.get("Project", "", project)
        except NotFound:
            raise _missing_project(project) from None

    @asynccontextmanager
    async def _project_first(self, project: str | None) -> AsyncIterator[None]:
        """A write to a project that is not there answers 404 even when its body is also invalid or clashes:
        the missing project is the first thing wrong with it. The project is read only on such a refusal."""
        try:
            yield
        except (InvalidObject, Problem) as exc:
            if project is not None and not (isinstance(exc, Problem) and exc.status == 404):
                await self.require_project(project)
            raise

    def validate(
        self,
        info: KindInfo,
        project: str | None,
        name: str | None,
        doc: Mapping[str, Any],
        origin: str | None = None,
    ) -> Resource:
        """Check a document against its kind and against where it was sent (path project and name). Its origin
        is the writer's (`origin`: a cluster's report; None: the control plane), never what the body says."""
        if not isinstance(doc, Mapping):
            raise InvalidObject([FieldError(path="", message="the body must be a JSON object")])
        body = dict(doc)
        kind_word = body.setdefault("kind", info.kind)
        # Checked before parsing: another kind's spec would otherwise be judged by its own schema.
        if isinstance(kind_word, str) and kind_word.lower() not in (info.kind.lower(), info.plural):
            message = f"this endpoint takes {info.kind}, not {kind_word!r}"
            raise InvalidObject([FieldError(path="kind", message=message)])
        metadata = body.get("metadata")
        if not isinstance(metadata, Mapping):
            metadata = {} if metadata is None else metadata
        if isinstance(metadata, Mapping):
            metadata = dict(metadata)
            if name is not None:
                metadata.setdefault("name", name)
            if project is not None:
                metadata.setdefault("project", project)
            metadata["origin"] = origin
            body["metadata"] = metadata
        resource = REGISTRY.parse(body)
        errors = []
        if name is not None and resource.metadata.name != name:
            errors.append(FieldError(path="metadata.name", message=f"does not match the name in the URL ({name})"))
        if project is not None and resource.metadata.project != project:
            errors.append(
                FieldError(path="metadata.project", message=f"does not match the project in the URL ({project})")
            )
        if errors:
            raise InvalidObject(errors)
        check_certificate_dates(resource)
        return resource

    async def _checked_write(
        self, info: KindInfo, resource: Resource, write: Callable[[Fence | None, Companion | None], Awaitable[_T]]
    ) -> _T:
        """`write` the resource, with what its rollout commits with, once it fits with what is stored (see
        `fenced`). That its project exists is checked by the write itself (see `_in_project`)."""
        meta = resource.metadata

        async def check(seen_from: int) -> tuple[Fence | None, Companion | None]:
            await check_references(self.store, resource)
            seen = [
                await check_intent(self.store, resource),
                await check_access(self.store, resource, self.api_lookup, seen_from),
            ]
            companion, policies = await rollout_companion(
                self.store, info, meta.project, meta.name, meta.labels, meta.origin, self.policy_lookup, seen_from
            )
            return joined(_fence(resource, seen), policies), companion

        async def write_checked(checked: tuple[Fence | None, Companion | None]) -> _T:
            return await write(*checked)

        return await fenced(check, write_checked, f"{resource.kind} {meta.name}")

    async def create(self, info: KindInfo, project: str | None, doc: Mapping[str, Any]) -> Resource:
        with _write_span(info, "create", project, None) as span:
            async with self._project_first(project):
                resource = await self._sealed(info, self.validate(info, project, None, doc))
                meta = resource.metadata
                span.set_attribute("meshplane.name", meta.name)

                async def create(fence: Fence | None, companion: Companion | None) -> StoredObject:
                    with _in_project(project, resource):
                        written = _written(resource, project)
                        return await self.store.create(
                            info.kind, meta.project or "", meta.name, fence=fence, companion=companion, **written
                        )

                stored = await self._checked_write(info, resource, create)
            await self._project_changed(info, meta.name)
            return to_resource(info, stored)

    async def put(
        self,
        info: KindInfo,
        project: str | None,
        name: str,
        doc: Mapping[str, Any],
        if_match: str | None = None,
        origin: str | None = None,
    ) -> tuple[Resource, bool]:
        """Create or replace, as `origin` (None: the control plane; `cluster/<name>`: that cluster's report).
        An object of another origin is never replaced (409)."""
        with _write_span(info, "put", project, name):
            async with self._project_first(project):
                return await self._put(info, project, name, doc, if_match, origin)

    async def adopt(self, info: KindInfo, project: str | None, name: str, placement: Placement | None) -> Resource:
        """Make an object a cluster made the control plane's, with `placement` (None: the one its spec asks
        for), after every check its new placement calls for. Its cluster's reports no longer change it."""
        with _write_span(info, "adopt", project, name):
            current = await self.get(info, project, name)
            if origin_cluster(current.metadata.origin) is None:
                raise Problem(409, f"{info.kind} {name!r} was not made by a cluster: there is nothing to adopt")
            if not info.delivered:
                raise Problem(
                    409,
                    f"{info.kind} {name!r} stays in the cluster that made it: the control plane shows {info.plural} "
                    "and delivers them to no cluster, so it cannot adopt one",
                )
            doc = current.to_wire()
            if placement is not None:
                doc["spec"]["placement"] = placement.to_wire()
            resource, _ = await self._put(info, project, name, doc, None, None, take_over=True)
            return resource

    async def _put(
        self,
        info: KindInfo,
        project: str | None,
        name: str,
        doc: Mapping[str, Any],
        if_match: str | None,
        origin: str | None,
        take_over: bool = False,
    ) -> tuple[Resource, bool]:
        resource = await self._sealed(info, self.validate(info, project, name, doc, origin))
        meta = resource.metadata
        expected = parse_revision(if_match, "If-Match")
        if expected is None:
            expected = parse_revision(meta.resource_version)

        async def put(fence: Fence | None, companion: Companion | None) -> tuple[StoredObject, bool]:
            with _in_project(project, resource), _owned_here(origin):
                written = _written(resource, project)
                return await self.store.put(
                    info.kind,
                    meta.project or "",
                    meta.name,
                    expected_revision=expected,
                    take_over=take_over,
                    fence=fence,
                    companion=companion,
                    **written,
                )

        stored, created = await self._checked_write(info, resource, put)
        if created:
            await self._project_changed(info, meta.name)
        return to_resource(info, stored), created

    async def patch(
        self, info: KindInfo, project: str | None, name: str, patch: Mapping[str, Any], if_match: str | None = None
    ) -> Resource:
        """JSON merge patch (RFC 7396) of the object's user-owned parts, applied at its current revision."""
        if not isinstance(patch, Mapping):
            raise InvalidObject([FieldError(path="", message="a merge patch must be a JSON object")])
        named = if_match is not None or (
            isinstance(patch.get("metadata"), Mapping) and "resourceVersion" in patch["metadata"]
        )
        with _write_span(info, "patch", project, name):
            for _ in range(CHECK_ATTEMPTS):
                try:
                    return await self._patch_once(info, project, name, patch, if_match)
                except Conflict:
                    if named:
                        raise
            raise Problem(409, f"{info.kind} {name!r} kept changing while it was patched; retry")

    async def _patch_once(
        self, info: KindInfo, project: str | None, name: str, patch: Mapping[str, Any], if_match: str | None
    ) -> Resource:
        """One read-merge-write. The revision just read guards the write, so a change made in between is never
        overwritten: `patch` reads again (a status written meanwhile) unless the caller named the revision."""
        current = await self.get(info, project, name)
        merged = merge_patch(current.to_wire(), {k: v for k, v in patch.items() if k != "status"})
        metadata = merged.get("metadata")
        if not isinstance(metadata, Mapping):
            raise InvalidObject([FieldError(path="metadata", message="must stay an object")])
        excluded = ("uid", "generation", "creationTimestamp", "origin")
        owned = {k: v for k, v in metadata.items() if k not in excluded}
        owned.setdefault("resourceVersion", current.metadata.resource_version)
        merged["metadata"] = owned
        resource, _ = await self._put(info, project, name, merged, if_match, None)
        return resource

    async def delete(self, info: KindInfo, project: str | None, name: str, if_match: str | None = None) -> Resource:
        with _write_span(info, "delete", project, name):
            if project is not None:
                await self.require_project(project)
            expected = parse_revision(if_match, "If-Match")

            async def check(_seen_from: int) -> Fence | None:
                if info.kind == "Project":
                    return await self._refuse_non_empty_project(name)
                return await refuse_referenced(self.store, info.kind, project or "", name)

            async def delete(fence: Fence | None) -> StoredObject:
                return await self.store.delete(
                    info.kind,
                    project or "",
                    name,
                    expected_revision=expected,
                    trace_context=current_carrier(),
                    fence=fence,
                )

            stored = await fenced(check, delete, f"{info.kind} {name}")
            await delete_dependents(self.store, info.kind, project or "", name)
            await self._project_changed(info, name)
            return to_resource(info, stored)

    async def _project_changed(self, info: KindInfo, name: str) -> None:
        """A project appeared or went: the services of the namespaces named like it move with it."""
        if info.kind == "Project":
            await rehome(self.store, name)

    async def _refuse_non_empty_project(self, project: str) -> Fence:
        """Objects users wrote must go first; those only the system writes follow the project (see `rehome`).
        The fence fails the delete over if such an object lands in the project after this look."""
        revisions = []
        for info in _USER_KINDS_IN_PROJECTS:
            items, revision = await self.store.list(info.kind, project, limit=1)
            if items:
                raise Problem(409, f"project {project!r} still holds {info.plural}; delete them first")
            revisions.append(revision)
        kinds = frozenset(info.kind for info in _USER_KINDS_IN_PROJECTS)
        return Fence(min(revisions), kinds, lambda other: other.project == project)

    async def get(self, info: KindInfo, project: str | None, name: str) -> Resource:
        if project is not None:
            await self.require_project(project)
        try:
            stored = await self.store.get(info.kind, project or "", name)
        except NotFound:
            where = f" in project {project!r}" if project else ""
            raise Problem(404, f"{info.kind} {name!r} not found{where}") from None
        return to_resource(info, stored)

    async def list(
        self,
        info: KindInfo,
        project: str | None,
        selector: LabelSelector | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        only: Callable[[StoredObject], bool] | None = None,
    ) -> Page:
        """A page of the kind's objects in `project` that match `selector` and `only` (what the caller may see:
        pages and their continue tokens are made of those alone)."""
        if project is not None:
            await self.require_project(project)
        if limit is not None and not 1 <= limit <= MAX_PAGE:
            raise Problem(
                422, f"limit must be between 1 and {MAX_PAGE}", [FieldError(path="limit", message="out of range")]
            )
        matching = (lambda o: selector.matches(o.labels)) if selector else None
        filters = [test for test in (only, matching) if test is not None]
        where: Callable[[StoredObject], bool] | None = (lambda o: all(f(o) for f in filters)) if filters else None
        scope = f"{info.kind}/{project or ''}"
        after = await self.continue_tokens.open(scope, continue_token) if continue_token else None
        fetch = limit + 1 if limit else None
        items, revision = await self.store.list(info.kind, project, where=where, limit=fetch, after=after)
        token = None
        if limit and len(items) > limit:
            items = items[:limit]
            token = await self.continue_tokens.seal(scope, (items[-1].project, items[-1].name))
        return Page([to_resource(info, o) for o in items], revision, token)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7396: objects merge key by key, null deletes, anything else replaces."""
    if not isinstance(patch, Mapping):
        return patch
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result
