"""Level-triggered reconciliation of the cluster's Kubernetes objects with what the control plane delivers.

Each pass reads the desired set (everything the agent holds) and the actual set (every object labelled
as managed by the control plane), applies what is missing or at another version, and deletes what is no
longer delivered. Nothing depends on having seen earlier events, so the pass at start also collects
what was removed while the agent was down. Passes are serialized; triggers during a pass coalesce into
one more pass; a pass cut short by a transient error is retried with backoff, and a periodic resync
catches anything else.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from meshplane.agent.kube.client import KubeClient, KubeRefused, KubeUnavailable, ResourceType
from meshplane.agent.kube.desired import (
    MANAGED_KINDS,
    MANAGED_SELECTOR,
    DesiredObject,
    ObjectKey,
    delivered_version,
)
from meshplane.lifecycle import DEFAULT_BACKOFF, Backoff, retry_forever, wait_at_most
from meshplane.model.manifests import MANIFEST_TYPE
from meshplane.observability.logging import get_logger
from meshplane.proto.v1 import control_plane_pb2

log = get_logger("meshplane.agent.kube")

Report = Callable[[list[control_plane_pb2.ObjectDelivery]], Awaitable[None]]


@dataclass(frozen=True)
class ApplyOutcome:
    type_url: str
    name: str
    version: str
    failure: str | None = None  # the API server's message when it refused the object


@dataclass
class PassResult:
    outcomes: list[ApplyOutcome]
    complete: bool  # False when a transient error left something undone


class PassIncomplete(Exception):
    """A transient error left part of a pass undone: the pass is repeated after a backoff."""


def drifted(actual: Mapping[str, Any], item: DesiredObject) -> bool:
    """The object in Kubernetes is not the delivered one: another version, or edited since (spec, labels)."""
    if delivered_version(actual) != item.version or actual.get("spec") != item.body.get("spec"):
        return True
    labels = actual.get("metadata", {}).get("labels") or {}
    return any(labels.get(k) != v for k, v in item.body["metadata"].get("labels", {}).items())


class KubeApplier:
    def __init__(
        self,
        client: KubeClient,
        desired: Callable[[], Mapping[ObjectKey, DesiredObject]],
        report: Report,
        resync_interval: float = 30.0,
        backoff: Backoff = DEFAULT_BACKOFF,
    ):
        self.client = client
        self.desired = desired
        self.report = report
        self.resync_interval = resync_interval
        self.backoff = backoff
        self._wake = asyncio.Event()
        self._reported: dict[tuple[str, str], tuple[str, bool]] = {}

    def notice(self, obj: Mapping[str, Any], deleted: bool = False) -> None:
        """A managed object changed in Kubernetes: reconcile when it is no longer what was delivered."""
        item = self.desired().get(ObjectKey.of(obj))
        if deleted or item is None or drifted(obj, item):
            self.trigger()

    def trigger(self) -> None:
        """Ask for a reconcile pass; any number of triggers during a pass cause one more pass."""
        self._wake.set()

    async def run(self) -> None:
        while True:
            await wait_at_most(self.resync_interval, self._wake.wait())
            await retry_forever(
                self._pass, what="reconcile pass", backoff=self.backoff, expected=(PassIncomplete,), logger=log
            )

    async def _pass(self) -> None:
        """One pass and its report; PassIncomplete when part of it is left to the next one (any other error:
        a bug, which must not stop the agent serving its gateways, and is retried the same way)."""
        self._wake.clear()
        result = await self.reconcile()
        await self._report(result.outcomes, prune=result.complete)
        if not result.complete:
            raise PassIncomplete("a transient error left part of the pass undone")

    async def reconcile(self) -> PassResult:
        """One pass: make the managed objects in Kubernetes equal to the desired set."""
        desired = dict(self.desired())
        complete = True
        actual: dict[ObjectKey, dict[str, Any]] = {}
        kinds = dict.fromkeys([*MANAGED_KINDS, *((key.api_version, key.kind) for key in desired)])
        for api_version, kind in kinds:
            try:
                resource = await self.client.resource_type(api_version, kind)
                for item in await self.client.list(resource, MANAGED_SELECTOR):
                    actual[ObjectKey.of(item)] = item
            except KubeRefused as exc:
                # Not served (nothing of it can exist) or not listable (nothing of it is collected).
                if exc.status_code != 404:
                    log.warning("cannot list managed objects", kind=kind, api_version=api_version, error=str(exc))
            except KubeUnavailable as exc:
                log.warning("API server unavailable", error=str(exc))
                return PassResult([], complete=False)

        outcomes = []
        for key, item in desired.items():
            current = actual.get(key)
            if current is not None and not drifted(current, item):
                outcomes.append(ApplyOutcome(item.type_url, item.name, item.version))
                continue
            try:
                await self._apply(item)
                outcomes.append(ApplyOutcome(item.type_url, item.name, item.version))
            except KubeRefused as exc:
                log.warning("API server refused an object", name=item.name, code=exc.status_code, error=str(exc))
                outcomes.append(ApplyOutcome(item.type_url, item.name, item.version, failure=str(exc)))
            except KubeUnavailable as exc:
                log.warning("object not applied yet", name=item.name, error=str(exc))
                complete = False

        for key in actual.keys() - desired.keys():
            try:
                resource = await self.client.resource_type(key.api_version, key.kind)
                await self.client.delete(resource, key.namespace, key.name)
                log.info("deleted an object the control plane no longer delivers", kind=key.kind, name=key.name)
            except (KubeRefused, KubeUnavailable) as exc:
                log.warning("cannot delete a removed object", kind=key.kind, name=key.name, error=str(exc))
                complete = False
        return PassResult(outcomes, complete)

    async def _apply(self, item: DesiredObject) -> None:
        resource: ResourceType = await self.client.resource_type(item.key.api_version, item.key.kind)
        try:
            await self.client.apply(resource, item.body)
        except KubeRefused as exc:
            if not (exc.status_code == 404 and exc.details_kind == "namespaces" and resource.namespaced):
                raise
            await self.client.create_namespace(item.key.namespace)
            await self.client.apply(resource, item.body)

    async def _report(self, outcomes: list[ApplyOutcome], prune: bool) -> None:
        """Report what changed: every failure, a manifest's success (nothing else reports manifests), and the
        recovery of an object that failed before. An object's gateway outcome is reported elsewhere, so an
        ordinary success of an object is not reported a second time."""
        deliveries = []
        seen = set()
        for outcome in outcomes:
            key = (outcome.type_url, outcome.name)
            seen.add(key)
            failed = outcome.failure is not None
            last = self._reported.get(key)
            self._reported[key] = (outcome.version, failed)
            if last == (outcome.version, failed):
                continue
            if failed or outcome.type_url == MANIFEST_TYPE or (last is not None and last[1]):
                state = control_plane_pb2.FAILED if failed else control_plane_pb2.APPLIED
                deliveries.append(
                    control_plane_pb2.ObjectDelivery(
                        type_url=outcome.type_url,
                        name=outcome.name,
                        version=outcome.version,
                        state=state,
                        message=outcome.failure or "",
                    )
                )
        if prune:  # forget objects no longer delivered; after an interrupted pass, `seen` is partial
            for key in self._reported.keys() - seen:
                del self._reported[key]
        if deliveries:
            await self.report(deliveries)
