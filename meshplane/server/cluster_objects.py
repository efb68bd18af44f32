"""What a cluster may publish: the objects made in it (its own API CRs) that its agent reports up.

A cluster originates only the kinds the registry marks `cluster_made`, only into the projects its Cluster
object names in `spec.publish.projects` (none until an admin says so), and through the object service, so
every check of a REST write applies. What it publishes keeps its origin, `cluster/<name>`, and is served on
that cluster alone (see `served_placement`) until an admin adopts it; from then on, as for any object of
another origin, the cluster's reports change nothing of it. A kind the control plane never delivers (a Gateway
API route) is shown only: its status is the one the cluster wrote, and it cannot be adopted.
"""

from __future__ import annotations

from typing import Any

import grpc
from pydantic import ValidationError

from meshplane.model.meta import cluster_origin
from meshplane.model.registry import REGISTRY, KindInfo, UnknownKind
from meshplane.model.resource import InvalidObject, field_errors
from meshplane.model.wire import plain_struct
from meshplane.proto.v1 import control_plane_pb2
from meshplane.server.objects import ObjectService
from meshplane.server.problems import Problem
from meshplane.store.errors import Conflict, NotFound, OwnedElsewhere


class ReportRefused(Exception):
    """A reported object the server does not take: the gRPC status to answer, and a bounded reason."""

    def __init__(self, code: grpc.StatusCode, reason: str, message: str):
        super().__init__(message)
        self.code = code
        self.reason = reason


_PROBLEM_CODES = {
    404: (grpc.StatusCode.FAILED_PRECONDITION, "project"),
    409: (grpc.StatusCode.FAILED_PRECONDITION, "clash"),
}
"""REST refusals of a report, as its answer: a missing project or a route clash is the store's state, not the
report's fault, and nothing but a change there makes it pass; any other is the report's."""


WITHDRAW_ATTEMPTS = 5


class ClusterObjects:
    def __init__(self, objects: ObjectService):
        self.objects = objects
        self.store = objects.store

    async def keep(self, cluster: str, local: control_plane_pb2.LocalObject) -> None:
        """Publish, change or withdraw one object `cluster` made, or raise ReportRefused saying why not."""
        info = self._publishable_kind(local)
        where = f"{info.kind} {local.project}/{local.name}"
        origin = cluster_origin(cluster)
        if local.deleted:  # withdrawing its own needs no right it may since have lost
            await self._withdraw(info, local, origin)
            return
        if local.project not in await self.publishable_projects(cluster):
            raise ReportRefused(
                grpc.StatusCode.PERMISSION_DENIED,
                "project",
                f"{where}: cluster {cluster} may not publish into project {local.project!r} (an admin allows it "
                "in the Cluster's spec.publish.projects)",
            )
        try:
            status = _shown_status(info, local)  # checked first: a report is taken whole or not at all
            await self.objects.put(info, local.project, local.name, _document(info, local), origin=origin)
            if status is not None:
                await self._show_status(info, local, status)
        except InvalidObject as exc:
            raise ReportRefused(grpc.StatusCode.INVALID_ARGUMENT, "invalid", f"{where}: {exc}") from None
        except OwnedElsewhere as exc:
            raise ReportRefused(grpc.StatusCode.ALREADY_EXISTS, "owned", str(exc)) from None
        except Problem as exc:
            code, reason = _PROBLEM_CODES.get(exc.status, (grpc.StatusCode.INVALID_ARGUMENT, "invalid"))
            raise ReportRefused(code, reason, f"{where}: {exc.detail}") from None

    async def _show_status(self, info: KindInfo, local: control_plane_pb2.LocalObject, status: dict[str, Any]) -> None:
        try:
            await self.store.set_status(info.kind, local.project, local.name, status)
        except NotFound:  # withdrawn meanwhile: its next report brings it back
            return

    async def publishable_projects(self, cluster: str) -> frozenset[str]:
        """What the cluster's Cluster object lets it publish into (nothing for a cluster not known yet)."""
        try:
            stored = await self.store.get("Cluster", "", cluster)
        except NotFound:
            return frozenset()
        return frozenset((stored.spec.get("publish") or {}).get("projects") or ())

    @staticmethod
    def _publishable_kind(local: control_plane_pb2.LocalObject) -> KindInfo:
        try:
            info = REGISTRY.resolve(local.kind)
        except UnknownKind as exc:
            raise ReportRefused(grpc.StatusCode.INVALID_ARGUMENT, "kind", str(exc)) from None
        if not info.cluster_made:
            made = ", ".join(kind.plural for kind in REGISTRY.cluster_made())
            raise ReportRefused(
                grpc.StatusCode.PERMISSION_DENIED,
                "kind",
                f"{info.kind} {local.name}: a cluster may not publish {info.plural}, only {made}",
            )
        return info

    async def _withdraw(self, info: KindInfo, local: control_plane_pb2.LocalObject, origin: str) -> None:
        """The cluster's object is gone there: gone here too, unless it is no longer the cluster's. Deleted at
        the revision it was seen the cluster's at; a status write in between only means looking again."""
        for _ in range(WITHDRAW_ATTEMPTS):
            try:
                current = await self.store.get(info.kind, local.project, local.name)
            except NotFound:
                return
            if current.origin != origin:
                return
            try:
                await self.objects.delete(info, local.project, local.name, if_match=str(current.revision))
                return
            except (NotFound, Problem):  # gone meanwhile, with its project or alone
                return
            except Conflict:
                continue
        raise ReportRefused(
            grpc.StatusCode.ABORTED, "busy", f"{info.kind} {local.project}/{local.name} kept changing; report again"
        )


def _shown_status(info: KindInfo, local: control_plane_pb2.LocalObject) -> dict[str, Any] | None:
    """The status the cluster wrote, kept for a kind the control plane never delivers (its status is the
    cluster's to tell, as a route's parents are); None for any other. InvalidObject when not of its shape."""
    if info.delivered or not local.HasField("status"):
        return None
    try:
        status = info.status.model_validate(plain_struct(local.status))
    except ValidationError as exc:
        raise InvalidObject(field_errors(exc, "status")) from None
    return status.model_dump(mode="json", by_alias=True, exclude_none=True)


def _document(info: KindInfo, local: control_plane_pb2.LocalObject) -> dict[str, Any]:
    spec = plain_struct(local.spec)
    metadata = {"name": local.name, "project": local.project, "labels": dict(local.labels)}
    return {"kind": info.kind, "metadata": metadata, "spec": spec}
