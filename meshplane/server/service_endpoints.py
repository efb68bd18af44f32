"""ServiceEndpoints: the services agents report, kept as read-only objects of origin `cluster/<name>`.

An endpoint lives in the project named like its Kubernetes namespace when that project exists, else in
`default`: namespaces are projects in the clusters already (our CRs are), and a namespace nobody made a
project for still has its services listed somewhere. The choice is made when an endpoint is written and
again when a project of that name is created or deleted, so creating project `shop` gathers the `shop`
services of every cluster, and deleting it hands them back to `default`.
"""

from __future__ import annotations

import contextlib
import json

from meshplane.model.meta import cluster_origin
from meshplane.model.registry import REGISTRY
from meshplane.model.services import CLUSTER_LABEL, endpoint_name
from meshplane.model.stored import StoredObject
from meshplane.model.wire import plain_struct
from meshplane.observability.logging import get_logger
from meshplane.observability.metrics import REPORTS_REFUSED
from meshplane.observability.tracing import current_carrier
from meshplane.proto.v1 import control_plane_pb2
from meshplane.store.errors import NotFound, OwnedElsewhere
from meshplane.store.store import Store

log = get_logger("meshplane.server.service_endpoints")

KIND = "ServiceEndpoint"
FALLBACK_PROJECT = "default"
"""Every server has it: it creates it on its first start."""


class _Projects:
    """Namespace -> project, each looked up once per report."""

    def __init__(self, store: Store):
        self.store = store
        self.known: dict[str, str] = {}

    async def of(self, namespace: str) -> str:
        if namespace not in self.known:
            try:
                await self.store.get("Project", "", namespace)
                self.known[namespace] = namespace
            except NotFound:
                self.known[namespace] = FALLBACK_PROJECT
        return self.known[namespace]


async def apply_report(store: Store, cluster: str, request: control_plane_pb2.ReportServicesRequest) -> None:
    """Keep the services a report adds or changes, drop those it removes, and after a complete listing drop
    the cluster's others. InvalidObject for a service whose spec does not validate.

    What the cluster has stored is read once, and a service reported as it is stored is not written again:
    an agent's first report after each start lists all its services, mostly unchanged.
    """
    origin = cluster_origin(cluster)
    projects = _Projects(store)
    held, _ = await store.list(KIND, where=lambda obj: obj.origin == origin)
    stored = {(obj.project, obj.name): obj for obj in held}
    for reported in request.services:
        spec = plain_struct(reported.spec)
        namespace, service = str(spec.get("namespace", "")), str(spec.get("service", ""))
        project = await projects.of(namespace)
        resource = REGISTRY.parse(
            {
                "kind": KIND,
                "metadata": {
                    "name": endpoint_name(cluster, namespace, service),
                    "project": project,
                    "labels": {**reported.labels, CLUSTER_LABEL: cluster},
                },
                "spec": {**spec, "cluster": cluster},
            }
        )
        meta = resource.metadata
        wire_spec = resource.spec.to_wire()
        if (current := stored.get((project, meta.name))) is not None and _same(current, wire_spec, meta.labels):
            continue
        try:
            await store.put(
                KIND,
                project,
                meta.name,
                spec=wire_spec,
                labels=meta.labels,
                origin=origin,
                trace_context=current_carrier(),
            )
        except OwnedElsewhere as exc:  # a name another cluster's endpoint has: that one stays as it is
            REPORTS_REFUSED.labels(cluster, "owned").inc()
            log.warning("reported service not kept", cluster=cluster, error=str(exc))
    removed = {endpoint_name(cluster, key.namespace, key.name) for key in request.removed}
    for obj in held:  # a cluster removes its own endpoints only, in whichever project they are
        if obj.name in removed:
            await _delete(store, obj.project, obj.name)
    if request.complete:
        present = {(key.namespace, key.name) for key in request.present}
        for obj in held:
            if (obj.spec["namespace"], obj.spec["service"]) not in present:
                await _delete(store, obj.project, obj.name)
            elif obj.project != (project := await projects.of(obj.spec["namespace"])):
                await _move(store, obj, project)


def _same(stored: StoredObject, spec: dict, labels: dict[str, str]) -> bool:
    """Whether writing `spec` and `labels` would change nothing (compared as the store keeps them: JSON)."""
    plain_spec, plain_labels = json.loads(json.dumps([spec, labels]))
    return stored.spec == plain_spec and stored.labels == plain_labels


async def rehome(store: Store, namespace: str) -> None:
    """Put the endpoints of every cluster's `namespace` in the project they belong to now: called when a
    project of that name is created or deleted."""
    project = await _Projects(store).of(namespace)
    held, _ = await store.list(KIND, where=lambda obj: obj.spec["namespace"] == namespace)
    for obj in held:
        if obj.project != project:
            await _move(store, obj, project)


async def _move(store: Store, obj: StoredObject, project: str) -> None:
    """Into `project`, unless a copy is there already (written by a newer report, so it stays)."""
    try:
        await store.get(KIND, project, obj.name)
    except NotFound:
        await store.put(
            KIND,
            project,
            obj.name,
            spec=obj.spec,
            labels=obj.labels,
            origin=obj.origin,
            trace_context=current_carrier(),
        )
    await _delete(store, obj.project, obj.name)


async def _delete(store: Store, project: str, name: str) -> None:
    with contextlib.suppress(NotFound):
        await store.delete(KIND, project, name, trace_context=current_carrier())
