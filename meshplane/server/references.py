"""What the spec fields that name other objects (`KindInfo.references`) ask of writes and deletes, for every kind.

A write finds what its references name (422 on each field's path) and commits only while they are still
there. A delete is refused while an object names the deleted one by a `REFUSE` reference (409, naming them);
objects naming it by a `CASCADE` reference go with it.
"""

from __future__ import annotations

from meshplane.model.registry import REGISTRY, OnDelete, Reference
from meshplane.model.resource import FieldError, InvalidObject, Resource
from meshplane.model.stored import ObjectKey, StoredObject
from meshplane.server.problems import Problem
from meshplane.store.batch import Fence
from meshplane.store.errors import NotFound
from meshplane.store.store import Store


def _named(resource: Resource) -> list[tuple[Reference, str]]:
    """The references of `resource`'s kind with the names its spec gives them (those it gives)."""
    references = REGISTRY.get(resource.kind).references
    if not references:
        return []
    wire = resource.spec.to_wire()
    return [(reference, name) for reference in references if (name := reference.named(wire)) is not None]


async def check_references(store: Store, resource: Resource) -> None:
    """InvalidObject (422) naming each reference field whose object is not stored in the resource's project."""
    project = resource.metadata.project or ""
    errors = []
    for reference, name in _named(resource):
        try:
            await store.get(reference.kind, project, name)
        except NotFound:
            errors.append(missing(reference.path, reference.kind, name, project))
    if errors:
        raise InvalidObject(errors)


def referenced(resource: Resource) -> tuple[ObjectKey, ...]:
    """The objects a write of `resource` must find live when it commits, so that one deleted after the check
    (whose delete saw nothing naming it yet) refuses the write."""
    project = resource.metadata.project or ""
    return tuple((reference.kind, project, name) for reference, name in _named(resource))


def missing_reference(resource: Resource, gone: NotFound) -> InvalidObject | None:
    """The refusal of a write whose `referenced` object was gone when it committed, as the check words it."""
    for reference, name in _named(resource):
        if (gone.kind, gone.name) == (reference.kind, name):
            return InvalidObject([missing(reference.path, reference.kind, name, gone.project)])
    return None


def missing(path: str, kind: str, name: str, project: str) -> FieldError:
    return FieldError(path=path, message=f"{kind} {name!r} does not exist in project {project!r}")


async def refuse_referenced(store: Store, kind: str, project: str, name: str) -> Fence | None:
    """An object is not deleted while others name it by a REFUSE reference (409, naming them, all of the
    project): one re-created under the same name would inherit them, and a subscription is the consumer's
    agreement, which a delete must not drop unseen. The fence refuses the delete if one lands meanwhile."""
    fields: dict[str, list[str]] = {}
    for info, reference in REGISTRY.referencing(kind):
        if reference.on_delete is OnDelete.REFUSE:
            fields.setdefault(info.kind, []).append(reference.field)
    if not fields:
        return None

    def names_it(other: StoredObject) -> bool:
        return other.project == project and any(other.spec.get(field) == name for field in fields.get(other.kind, ()))

    revisions = []
    for holder in fields:
        holders, revision = await store.list(holder, project, where=names_it)
        if holders:
            listed = ", ".join(sorted(other.name for other in holders))
            raise Problem(
                409, f"{kind} {name} is still named by {REGISTRY.get(holder).plural} {listed}; delete them first"
            )
        revisions.append(revision)
    return Fence(min(revisions), frozenset(fields), names_it)


async def delete_dependents(store: Store, kind: str, project: str, name: str) -> None:
    """The objects naming a deleted one by a CASCADE reference go with it: an application's key records are
    bound to its uid (see credentials), so no gateway would take them for another application of the name."""
    for info, reference in REGISTRY.referencing(kind):
        if reference.on_delete is not OnDelete.CASCADE:
            continue
        field = reference.field
        dependents, _ = await store.list(info.kind, project, where=lambda o, field=field: o.spec.get(field) == name)
        for dependent in dependents:
            try:
                await store.delete(info.kind, project, dependent.name)
            except NotFound:
                continue
