"""List, then watch from the list's version, for as long as the agent runs.

A watch the API server ends is resumed from the last version seen (bookmarks keep it fresh); a version
too old to resume from (410 Gone) means a new list at once; any other failure means a new list after a
backoff, since events may have been missed meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from meshplane.agent.kube.client import KubeClient, KubeRefused, KubeUnavailable, ResourceType, WatchExpired
from meshplane.lifecycle import DEFAULT_BACKOFF, Backoff, describe
from meshplane.observability.logging import get_logger

log = get_logger("meshplane.agent.kube.watch")

Listed = Callable[[list[dict[str, Any]]], Awaitable[None]]
"""Told every object after each list: the whole truth, replacing whatever came before."""
Changed = Callable[[str, dict[str, Any]], Awaitable[None]]
"""Told each change after a list: ADDED, MODIFIED or DELETED, and the object."""
Discover = Callable[[], Awaitable[ResourceType]]
"""Finds a resource that may not be served yet (a custom resource before its definition is installed)."""


async def follow(
    client: KubeClient,
    resource: ResourceType | Discover,
    listed: Listed,
    changed: Changed,
    backoff: Backoff = DEFAULT_BACKOFF,
) -> None:
    """Follow `resource`, or the one `resource()` discovers: discovery is retried like a failed list. A list
    that succeeds is progress: the next failure waits the shortest delay again."""
    retries = backoff.retries()
    while True:
        try:
            if not isinstance(resource, ResourceType):
                resource = await resource()
            items, version = await client.list_at(resource)
            await listed(items)
            retries.reset()
            while True:
                async for kind, obj in client.watch(resource, version):
                    version = obj.get("metadata", {}).get("resourceVersion") or version
                    if kind != "BOOKMARK":
                        await changed(kind, obj)
        except WatchExpired:
            log.info("watch expired; listing again", resource=_plural(resource))
            continue
        except Exception as exc:  # a bug here must not stop the agent serving its gateways
            delay = retries.next_delay()
            bug = not isinstance(exc, KubeUnavailable | KubeRefused | ValueError)
            log.warning(
                "watch failed; retrying",
                resource=_plural(resource),
                error=describe(exc),
                retry_in=round(delay, 2),
                exc_info=exc if bug else None,
            )
        await asyncio.sleep(delay)


def _plural(resource: ResourceType | Discover) -> str:
    return resource.plural if isinstance(resource, ResourceType) else "(not discovered yet)"
