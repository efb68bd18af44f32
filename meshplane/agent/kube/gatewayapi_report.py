"""The cluster's Gateway API routes reported up, so that the control plane shows them with their origin.

Only the routes attached to a Gateway of ours (a parentRef naming a Gateway of a GatewayClass of this
controller) are reported: those are the routes this cluster's gateways serve, and the status they carry is ours
to tell. A route for another controller's Gateway is that controller's business, and a cluster may hold many.
A reported route that is deleted, or no longer names a Gateway of ours, is reported deleted; the routes
reported are kept in the agent's state, so one deleted while the agent was down is reported deleted once the
kinds that tell which routes are ours have all been listed again (never before: a route not seen yet is not
gone).

Each route goes up as its own report (a refused one never holds back another), with its labels, its spec and
our controller's `status.parents` entries, again whenever one of them changes. A route the control plane refuses
(a namespace whose project the cluster may not publish into) is logged once per namespace and reason; that
version is not reported again, its next change is.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from google.protobuf import struct_pb2

from meshplane.agent.kube.gatewayapi import our_gateways
from meshplane.agent.kube.gatewayapi_watch import GatewayApiWatch
from meshplane.gatewayapi.objects import GATEWAY_KIND
from meshplane.gatewayapi.state import CONTROLLER_NAME, GROUP, KubeObject, ObjectKey
from meshplane.observability.logging import get_logger
from meshplane.proto.v1 import control_plane_pb2

log = get_logger("meshplane.agent.kube.gatewayapi_report")

REPORTED_KINDS = {"http_routes": "HTTPRoute", "grpc_routes": "GRPCRoute"}
"""The watch's field of each route kind reported up."""

ReportObjects = Callable[[list[control_plane_pb2.LocalObject]], Awaitable[None]]
RouteKey = tuple[str, str, str]
"""(kind, namespace, name)."""
WHOLE = frozenset({"gateway_classes", "gateways", *REPORTED_KINDS})
"""The watch's fields that must all have been listed before a route not found counts as gone."""


class ReportedRoutes(Protocol):
    """Where the routes reported up are remembered across restarts (the agent's local state)."""

    reported_routes: frozenset[RouteKey]

    async def keep_reported_routes(self, routes: frozenset[RouteKey]) -> None: ...


def parent_gateways(route: KubeObject) -> set[ObjectKey]:
    """The Gateways a route's parentRefs name (the spec's defaults: group and kind Gateway, the route's
    namespace)."""
    namespace = (route.get("metadata") or {}).get("namespace", "")
    out = set()
    for ref in (route.get("spec") or {}).get("parentRefs") or []:
        if ref.get("group", GROUP) == GROUP and ref.get("kind", GATEWAY_KIND) == GATEWAY_KIND and ref.get("name"):
            out.add((ref.get("namespace") or namespace, ref["name"]))
    return out


def our_parents(route: KubeObject) -> dict[str, Any]:
    """The route's status as this controller wrote it: its own `parents` entries alone."""
    parents = (route.get("status") or {}).get("parents") or []
    return {"parents": [entry for entry in parents if entry.get("controllerName") == CONTROLLER_NAME]}


def local_route(kind: str, route: KubeObject) -> control_plane_pb2.LocalObject:
    meta = route["metadata"]
    spec, status = struct_pb2.Struct(), struct_pb2.Struct()
    spec.update(route.get("spec") or {})
    status.update(our_parents(route))
    return control_plane_pb2.LocalObject(
        kind=kind,
        project=meta.get("namespace", ""),
        name=meta["name"],
        labels=meta.get("labels") or {},
        spec=spec,
        status=status,
    )


def _fingerprint(route: KubeObject) -> str:
    labels = (route.get("metadata") or {}).get("labels") or {}
    return json.dumps([labels, route.get("spec") or {}, our_parents(route)], sort_keys=True)


class RouteReport:
    def __init__(self, report_objects: ReportObjects, memory: ReportedRoutes):
        self.report_objects = report_objects
        self.memory = memory
        self._reported: dict[RouteKey, str] = dict.fromkeys(memory.reported_routes, "")
        """Each route reported up, with the fingerprint of the version reported ("" for one reported before
        this start, whose version is not known)."""
        self._refusals_told: set[tuple[str, str]] = set()

    async def seen(self, watch: GatewayApiWatch) -> None:
        """The cluster's objects now: report what changed since the last look."""
        objects = watch.objects
        ours = set(our_gateways(objects["gateway_classes"], objects["gateways"]))
        current: dict[RouteKey, KubeObject] = {
            (kind, *key): route
            for field, kind in REPORTED_KINDS.items()
            for key, route in objects[field].items()
            if parent_gateways(route) & ours
        }
        for key, route in sorted(current.items()):
            fingerprint = _fingerprint(route)
            if self._reported.get(key) != fingerprint:
                await self.report_objects([local_route(key[0], route)])
                self._reported[key] = fingerprint
                log.info("reported a route", kind=key[0], project=key[1], name=key[2])
        if watch.listed >= WHOLE:
            for key in sorted(self._reported.keys() - current.keys()):
                kind, namespace, name = key
                del self._reported[key]
                deleted = control_plane_pb2.LocalObject(kind=kind, project=namespace, name=name, deleted=True)
                await self.report_objects([deleted])
                log.info("reported a route deleted", kind=kind, project=namespace, name=name)
        await self.memory.keep_reported_routes(frozenset(self._reported))

    async def refused(self, objects: list[control_plane_pb2.LocalObject], reason: str) -> None:
        """The control plane did not take these routes: said once per namespace and reason, as a namespace the
        cluster may not publish into refuses every route in it alike."""
        for local in objects:
            told = (local.project, reason.split(":", 1)[-1])
            if told not in self._refusals_told:
                self._refusals_told.add(told)
                log.warning(
                    "the control plane does not show this namespace's routes",
                    kind=local.kind,
                    project=local.project,
                    name=local.name,
                    reason=reason,
                )
