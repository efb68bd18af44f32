"""The agent as its cluster's operator: it watches the API custom resources in every namespace.

A CR without the managed-by label was made in the cluster itself (kubectl, a local operator): it is
reported up, with its changes and its deletion, so that the control plane shows it with its origin.
An event on a managed CR asks the applier to check it, so edits to what the control plane delivered
(drift) are put back; the applier's periodic resync catches whatever a watch misses.

The watch is a plain streamed `?watch=1` from the resourceVersion of a full list, with bookmarks; a
410 Gone (the version is too old) or any error starts again from a new list, with backoff on errors.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import httpx
from google.protobuf import struct_pb2

from meshplane.agent.kube.client import KubeClient, KubeRefused, KubeUnavailable, ResourceType
from meshplane.agent.kube.desired import MANAGED_BY, MANAGED_BY_VALUE, ObjectKey
from meshplane.model.resource import API_VERSION
from meshplane.observability.logging import get_logger
from meshplane.proto.v1 import control_plane_pb2

log = get_logger("meshplane.agent.kube.operator")

ReportObjects = Callable[[list[control_plane_pb2.LocalObject]], Awaitable[None]]
WATCHED_KIND = "API"
WATCH_TIMEOUT = 300  # seconds the API server keeps one watch open; it then ends cleanly and is resumed


class _Gone(Exception):
    """The watched resourceVersion is too old: list again."""


def is_managed(obj: Mapping[str, Any]) -> bool:
    return (obj.get("metadata", {}).get("labels") or {}).get(MANAGED_BY) == MANAGED_BY_VALUE


def _fingerprint(obj: Mapping[str, Any]) -> str:
    labels = obj.get("metadata", {}).get("labels") or {}
    return json.dumps([labels, obj.get("spec") or {}], sort_keys=True)


class KubeOperator:
    def __init__(
        self,
        client: KubeClient,
        report_objects: ReportObjects,
        on_managed: Callable[[Mapping[str, Any], bool], None],
        known_local: Callable[[], Iterable[tuple[str, str]]] = tuple,
        is_delivered: Callable[[ObjectKey], bool] = lambda key: False,
    ):
        """`on_managed(obj, deleted)` is told of every event on a managed CR; `known_local()` names the
        (namespace, name) of local objects reported before (so deletions while the agent was down are
        reported too); `is_delivered(key)` says the control plane delivers an object there (never reported)."""
        self.client = client
        self.report_objects = report_objects
        self.on_managed = on_managed
        self.known_local = known_local
        self.is_delivered = is_delivered
        self._reported: dict[tuple[str, str], str] = {}  # (namespace, name) -> fingerprint last reported
        self._started = False

    async def run(self) -> None:
        delay = 0.5
        while True:
            try:
                resource = await self.client.resource_type(API_VERSION, WATCHED_KIND)
                version = await self._relist(resource)
                delay = 0.5
                while True:
                    version = await self._watch(resource, version)
            except _Gone:
                log.info("watch expired; listing again")
                continue
            except (KubeUnavailable, KubeRefused, httpx.HTTPError, ValueError) as exc:
                log.warning("watch of custom resources failed; retrying", error=str(exc), retry_in=round(delay, 2))
            except Exception:  # a bug here must not stop the agent serving its gateways
                log.exception("operator failed; retrying")
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))
            delay = min(delay * 2, 30.0)

    async def _get(self, path: str, params: Mapping[str, str]) -> dict[str, Any]:
        try:
            response = await self.client.http.get(path, params=params)
        except httpx.HTTPError as exc:
            raise KubeUnavailable(f"GET {path}: {exc!r}") from None
        if response.status_code == 410:
            raise _Gone()
        if response.status_code >= 400:
            raise KubeUnavailable(f"GET {path}: {response.status_code} {response.text}", response.status_code)
        return response.json()

    async def _relist(self, resource: ResourceType) -> str:
        """Every CR now; local ones that vanished since they were reported are reported deleted."""
        items: list[dict[str, Any]] = []
        params = {"limit": "500"}
        while True:
            page = await self._get(resource.path(), params)
            items.extend(page.get("items", []))
            version = page.get("metadata", {}).get("resourceVersion", "")
            if not (token := page.get("metadata", {}).get("continue")):
                break
            params["continue"] = token
        if not self._started:
            self._started = True
            for key in self.known_local():
                self._reported.setdefault(key, "")
        present = set()
        for item in items:
            item.setdefault("apiVersion", resource.api_version)
            item.setdefault("kind", resource.kind)
            meta = item["metadata"]
            present.add((meta.get("namespace", ""), meta["name"]))
            await self._event("ADDED", item)
        gone = [key for key in self._reported if key not in present]
        for namespace, name in gone:
            await self._report_deleted(namespace, name)
        return version

    async def _watch(self, resource: ResourceType, version: str) -> str:
        """Follow changes from `version` until the API server ends the watch; the version reached."""
        params = {
            "watch": "1",
            "allowWatchBookmarks": "true",
            "resourceVersion": version,
            "timeoutSeconds": str(WATCH_TIMEOUT),
        }
        timeout = httpx.Timeout(10.0, read=WATCH_TIMEOUT + 30)
        async with self.client.http.stream("GET", resource.path(), params=params, timeout=timeout) as response:
            if response.status_code == 410:
                raise _Gone()
            if response.status_code >= 400:
                await response.aread()
                raise KubeUnavailable(f"watch: {response.status_code} {response.text}", response.status_code)
            async for line in response.aiter_lines():
                if not line.strip():
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise _Gone()
                    raise KubeUnavailable(f"watch error: {obj.get('message')}", obj.get("code") or 0)
                version = obj.get("metadata", {}).get("resourceVersion") or version
                if kind == "BOOKMARK":
                    continue
                obj.setdefault("apiVersion", resource.api_version)
                obj.setdefault("kind", resource.kind)
                await self._event(kind, obj)
        return version

    async def _event(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        namespace, name = meta.get("namespace", ""), meta["name"]
        deleted = kind == "DELETED"
        if is_managed(obj):
            self.on_managed(obj, deleted)
            if (namespace, name) in self._reported:  # a local object taken over: no longer ours to report
                await self._report_deleted(namespace, name)
            return
        if self.is_delivered(ObjectKey.of(obj)):
            return
        if deleted:
            await self._report_deleted(namespace, name)
            return
        fingerprint = _fingerprint(obj)
        if self._reported.get((namespace, name)) == fingerprint:
            return
        spec = struct_pb2.Struct()
        spec.update(obj.get("spec") or {})
        await self.report_objects(
            [
                control_plane_pb2.LocalObject(
                    kind=WATCHED_KIND,
                    project=namespace,
                    name=name,
                    labels=meta.get("labels") or {},
                    spec=spec,
                )
            ]
        )
        self._reported[(namespace, name)] = fingerprint
        log.info("reported a locally made object", kind=WATCHED_KIND, project=namespace, name=name)

    async def _report_deleted(self, namespace: str, name: str) -> None:
        if self._reported.pop((namespace, name), None) is None:
            return
        await self.report_objects(
            [control_plane_pb2.LocalObject(kind=WATCHED_KIND, project=namespace, name=name, deleted=True)]
        )
        log.info("reported a locally made object deleted", kind=WATCHED_KIND, project=namespace, name=name)
