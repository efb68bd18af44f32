"""Writes the status `program` gives each object of ours through the status subresource, as the Gateway API
asks: a condition keeps its lastTransitionTime while its status stays; on a route, only this controller's
`status.parents` entries are ours to replace, other controllers' stay where they are.

Nothing is written when the object has the status already; a write names the resourceVersion it read, so one
racing another controller's is read again and redone instead of overwriting it.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import Any

from meshplane.agent.kube.client import KubeClient, KubeRefused, KubeUnavailable
from meshplane.agent.kube.gatewayapi_watch import GATEWAY_API_VERSION
from meshplane.gatewayapi.state import CONTROLLER_NAME, StatusKey
from meshplane.lifecycle import describe
from meshplane.observability.logging import get_logger

log = get_logger("meshplane.agent.kube.gatewayapi")

ROUTE_KINDS = frozenset({"HTTPRoute", "GRPCRoute"})
CONFLICT_RETRIES = 5
Status = Mapping[str, Any]


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def kept_conditions(before: list[Mapping[str, Any]] | None, after: list[Mapping[str, Any]], now: str) -> list[dict]:
    """`after`'s conditions, each with the lastTransitionTime of `before`'s of the same type while its status
    did not change, else `now`."""
    old = {condition.get("type"): condition for condition in before or []}
    out = []
    for condition in after:
        was = old.get(condition.get("type"))
        if was is not None and was.get("status") == condition.get("status") and was.get("lastTransitionTime"):
            at = was["lastTransitionTime"]
        else:
            at = now  # `program` has no clock: the time is the writer's
        out.append({**condition, "lastTransitionTime": at})
    return out


def _with_conditions(before: Mapping[str, Any] | None, after: Mapping[str, Any], now: str) -> dict[str, Any]:
    if "conditions" not in after:
        return dict(after)
    return {**after, "conditions": kept_conditions((before or {}).get("conditions"), after["conditions"], now)}


def _parent_key(entry: Mapping[str, Any]) -> tuple[str, str]:
    ref = entry.get("parentRef") or {}
    return entry.get("controllerName", ""), repr(sorted(ref.items()))


def _route_parents(before: list[Mapping[str, Any]], ours: list[Mapping[str, Any]], now: str) -> list[dict]:
    """Other controllers' entries as they are and in place; ours replaced in place, new ones after, gone ones
    dropped."""
    wanted = {_parent_key(entry): entry for entry in ours}
    out: list[dict] = []
    for entry in before:
        if entry.get("controllerName") != CONTROLLER_NAME:
            out.append(dict(entry))
        elif (new := wanted.pop(_parent_key(entry), None)) is not None:
            out.append(_with_conditions(entry, new, now))
    out += [_with_conditions(None, entry, now) for entry in wanted.values()]
    return out


def _listeners(before: list[Mapping[str, Any]], after: list[Mapping[str, Any]], now: str) -> list[dict]:
    old = {listener.get("name"): listener for listener in before}
    return [_with_conditions(old.get(listener.get("name")), listener, now) for listener in after]


def desired_status(kind: str, current: Status | None, status: Status, now: str | None = None) -> dict[str, Any]:
    """The status to write over `current`, from what `program` gave."""
    now = now or _now()
    current = current or {}
    out = _with_conditions(current, status, now)
    if "listeners" in status:
        out["listeners"] = _listeners(current.get("listeners") or [], status["listeners"], now)
    if kind in ROUTE_KINDS:
        ours = [entry for entry in status.get("parents") or [] if entry.get("controllerName") == CONTROLLER_NAME]
        out["parents"] = _route_parents(current.get("parents") or [], ours, now)
    return out


def has_status(current: Status | None, desired: Status) -> bool:
    """Whether the object has every field of `desired` already (a merge patch would change nothing)."""
    current = current or {}
    return all(current.get(key) == value for key, value in desired.items())


class StatusWriter:
    """Writes statuses to the API server; `current(key)` is the object as last seen (the watch's copy)."""

    def __init__(self, client: KubeClient, current: Callable[[StatusKey], Mapping[str, Any] | None]):
        self.client = client
        self.current = current

    async def write(self, statuses: Mapping[StatusKey, Status]) -> bool:
        """Write each status that differs from the object's; one failing does not stop the others. False when
        one could not be written for now (the API server away or busy): worth trying again."""
        written = True
        for key, status in sorted(statuses.items()):
            try:
                await self._write(key, status)
            except (KubeRefused, KubeUnavailable) as exc:
                written = written and isinstance(exc, KubeRefused)
                kind, namespace, name = key
                log.warning(
                    "a Gateway API status could not be written",
                    kind=kind,
                    namespace=namespace,
                    name=name,
                    error=describe(exc),
                )
        return written

    async def _write(self, key: StatusKey, status: Status) -> None:
        kind, namespace, name = key
        resource = await self.client.resource_type(GATEWAY_API_VERSION, kind)
        obj = self.current(key)
        for attempt in range(CONFLICT_RETRIES):
            if obj is None:
                return  # gone: nothing to write to
            desired = desired_status(kind, obj.get("status"), status)
            if has_status(obj.get("status"), desired):
                return
            version = obj["metadata"].get("resourceVersion")
            try:
                await self.client.patch_status(resource, namespace, name, desired, resource_version=version)
                return
            except KubeUnavailable as exc:
                if exc.status_code != 409 or attempt == CONFLICT_RETRIES - 1:
                    raise
            obj = await self.client.get(resource, namespace, name)
