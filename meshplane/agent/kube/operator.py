"""The agent as its cluster's operator: it watches the API custom resources in every namespace.

A CR without the managed-by label was made in the cluster itself (kubectl, a local operator): it is
validated with the control plane's model and handed to the agent, whose gateways serve it at once
(an invalid one is not served; its `Accepted` condition says why), and it is reported up, with its
changes and its deletion, so that the control plane shows it with its origin. A version the control plane
refuses (a kind or project the cluster may not publish, a route clash, an object owned elsewhere) is not
served either, and `Accepted` says why (reason `Refused`).
An event on a managed CR asks the applier to check it, so edits to what the control plane delivered
(drift) are put back; the applier's periodic resync catches whatever a watch misses.

The CRs are listed, then watched, with `watch.follow`: a new list after a 410 Gone, backoff on errors.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from google.protobuf import struct_pb2

from meshplane.agent.kube.client import KubeClient, KubeRefused, KubeUnavailable
from meshplane.agent.kube.desired import MANAGED_BY, MANAGED_BY_VALUE, ObjectKey
from meshplane.agent.kube.watch import follow
from meshplane.lifecycle import DEFAULT_BACKOFF, Backoff
from meshplane.model.registry import REGISTRY
from meshplane.model.resource import API_VERSION, InvalidObject, Resource
from meshplane.observability.logging import get_logger
from meshplane.proto.v1 import control_plane_pb2

log = get_logger("meshplane.agent.kube.operator")

ReportObjects = Callable[[list[control_plane_pb2.LocalObject]], Awaitable[None]]
KeepLocal = Callable[[str, str, Resource | None], Awaitable[str | None]]
"""Serve (namespace, name) as this API (None: not at all); answers why the cluster will not, or None."""
WATCHED_KIND = "API"
ACCEPTED = "Accepted"


def is_managed(obj: Mapping[str, Any]) -> bool:
    return (obj.get("metadata", {}).get("labels") or {}).get(MANAGED_BY) == MANAGED_BY_VALUE


def _fingerprint(obj: Mapping[str, Any]) -> str:
    labels = obj.get("metadata", {}).get("labels") or {}
    return json.dumps([labels, obj.get("spec") or {}], sort_keys=True)


def local_api(obj: Mapping[str, Any]) -> Resource:
    """A CR made in the cluster as the model the control plane validates its copy with (InvalidObject)."""
    meta = obj["metadata"]
    metadata = {"name": meta["name"], "project": meta.get("namespace"), "labels": meta.get("labels") or {}}
    return REGISTRY.parse({"kind": WATCHED_KIND, "metadata": metadata, "spec": obj.get("spec") or {}})


def accepted_conditions(
    obj: Mapping[str, Any], problem: str | None, reason: str = "Invalid"
) -> list[dict[str, Any]] | None:
    """The CR's conditions with `Accepted` saying whether the cluster's gateways serve it (and, when not, the
    `reason`: Invalid, or Refused by the control plane), or None when they say so already (for this
    generation)."""
    conditions = [dict(c) for c in (obj.get("status") or {}).get("conditions") or []]
    current = next((c for c in conditions if c.get("type") == ACCEPTED), {})
    status = "False" if problem else "True"
    message = problem or "served by this cluster's gateways"
    generation = obj["metadata"].get("generation")
    shown = (current.get("status"), current.get("message"), current.get("observedGeneration"))
    if shown == (status, message, generation):
        return None
    since = current.get("lastTransitionTime") if current.get("status") == status else None
    accepted = {
        "type": ACCEPTED,
        "status": status,
        "reason": reason if problem else "Served",
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": since or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    return [*(c for c in conditions if c.get("type") != ACCEPTED), accepted]


class KubeOperator:
    def __init__(
        self,
        client: KubeClient,
        report_objects: ReportObjects,
        on_managed: Callable[[Mapping[str, Any], bool], None],
        keep_local: KeepLocal,
        known_local: Callable[[], Iterable[tuple[str, str]]] = tuple,
        is_delivered: Callable[[ObjectKey], bool] = lambda key: False,
        backoff: Backoff = DEFAULT_BACKOFF,
    ):
        """`on_managed(obj, deleted)` is told of every event on a managed CR; `keep_local(namespace, name,
        api)` of every local one as it should be served (None: not at all), and answers why the cluster
        will not serve it (its `Accepted` condition says so); `known_local()` names the
        (namespace, name) of local objects known before (so deletions while the agent was down count
        too); `is_delivered(key)` says the control plane delivers an object there (never local)."""
        self.client = client
        self.report_objects = report_objects
        self.on_managed = on_managed
        self.keep_local = keep_local
        self.known_local = known_local
        self.is_delivered = is_delivered
        self.backoff = backoff
        self._reported: dict[tuple[str, str], str] = {}  # (namespace, name) -> fingerprint last handled
        self._sent: dict[tuple[str, str], tuple[control_plane_pb2.LocalObject, Mapping[str, Any]]] = {}
        """(namespace, name) -> the last version reported up, and its CR."""
        self._started = False

    async def run(self) -> None:
        await follow(
            self.client,
            lambda: self.client.resource_type(API_VERSION, WATCHED_KIND),
            self._listed,
            self._event,
            self.backoff,
        )

    async def _listed(self, items: list[dict[str, Any]]) -> None:
        """Every CR now; local ones that vanished since they were reported are reported deleted."""
        if not self._started:
            self._started = True
            for key in self.known_local():
                self._reported.setdefault(key, "")
        present = set()
        for item in items:
            meta = item["metadata"]
            present.add((meta.get("namespace", ""), meta["name"]))
            await self._event("ADDED", item)
        gone = [key for key in self._reported if key not in present]
        for namespace, name in gone:
            await self._forget(namespace, name)

    async def _event(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        namespace, name = meta.get("namespace", ""), meta["name"]
        deleted = kind == "DELETED"
        managed = is_managed(obj)
        if managed:
            self.on_managed(obj, deleted)
        if managed or deleted or self.is_delivered(ObjectKey.of(obj)):
            # Gone, or the control plane's (a local object it took over): no longer the cluster's own.
            await self._forget(namespace, name)
            return
        fingerprint = _fingerprint(obj)
        if self._reported.get((namespace, name)) == fingerprint:
            return
        try:
            api: Resource | None = local_api(obj)
            problem = None
        except InvalidObject as exc:
            api, problem = None, str(exc)
        refusal = await self.keep_local(namespace, name, api)
        await self._set_accepted(obj, problem or refusal)
        if problem:  # the control plane would refuse it just the same
            self._reported[(namespace, name)] = fingerprint
            log.warning("a locally made API is invalid; not served", project=namespace, name=name, reason=problem)
            return
        spec = struct_pb2.Struct()
        spec.update(obj.get("spec") or {})
        local = control_plane_pb2.LocalObject(
            kind=WATCHED_KIND, project=namespace, name=name, labels=meta.get("labels") or {}, spec=spec
        )
        await self.report_objects([local])
        self._sent[(namespace, name)] = (local, obj)
        self._reported[(namespace, name)] = fingerprint
        log.info("reported a locally made object", kind=WATCHED_KIND, project=namespace, name=name)

    async def refused(self, objects: list[control_plane_pb2.LocalObject], reason: str) -> None:
        """The control plane refused these reported objects: a version still current is not served here either,
        and its CR says why. That version is not reported again; the CR's next change is (or the agent's next
        start, once an admin lets the cluster publish it)."""
        for local in objects:
            key = (local.project, local.name)
            sent = self._sent.get(key)
            if local.deleted or sent is None or sent[0] != local:
                continue  # a newer version is on its way and will be judged on its own
            log.warning("the control plane refused a locally made API; not served", project=key[0], name=key[1])
            await self.keep_local(local.project, local.name, None)
            await self._set_accepted(sent[1], f"the control plane refused it: {reason}", "Refused")

    async def _set_accepted(self, obj: Mapping[str, Any], problem: str | None, reason: str = "Invalid") -> None:
        """Show on the CR whether it is served, as `kubectl describe` and `kubectl wait` read it."""
        conditions = accepted_conditions(obj, problem, reason)
        if conditions is None:
            return
        namespace, name = obj["metadata"].get("namespace", ""), obj["metadata"]["name"]
        try:
            resource = await self.client.resource_type(API_VERSION, WATCHED_KIND)  # discovered before the list
            await self.client.patch_status(resource, namespace, name, {"conditions": conditions})
        except (KubeRefused, KubeUnavailable) as exc:  # the CR may be gone already; the log keeps the reason
            log.warning("cannot set the condition of a local API", project=namespace, name=name, error=str(exc))

    async def _forget(self, namespace: str, name: str) -> None:
        """The cluster's own API at (namespace, name) is no more: not served, and reported deleted."""
        await self.keep_local(namespace, name, None)
        await self._report_deleted(namespace, name)

    async def _report_deleted(self, namespace: str, name: str) -> None:
        self._sent.pop((namespace, name), None)
        if self._reported.pop((namespace, name), None) is None:
            return
        await self.report_objects(
            [control_plane_pb2.LocalObject(kind=WATCHED_KIND, project=namespace, name=name, deleted=True)]
        )
        log.info("reported a locally made object deleted", kind=WATCHED_KIND, project=namespace, name=name)
