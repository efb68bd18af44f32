"""List, then watch from the list's version, for as long as the agent runs.

A watch the API server ends is resumed from the last version seen (bookmarks keep it fresh); a version
too old to resume from (410 Gone) means a new list at once; any other failure means a new list after a
backoff, since events may have been missed meanwhile.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any

from meshplane.agent.kube.client import KubeClient, KubeRefused, KubeUnavailable, ResourceType, WatchExpired
from meshplane.observability.logging import get_logger

log = get_logger("meshplane.agent.kube.watch")

Listed = Callable[[list[dict[str, Any]]], Awaitable[None]]
"""Told every object after each list: the whole truth, replacing whatever came before."""
Changed = Callable[[str, dict[str, Any]], Awaitable[None]]
"""Told each change after a list: ADDED, MODIFIED or DELETED, and the object."""
Discover = Callable[[], Awaitable[ResourceType]]
"""Finds a resource that may not be served yet (a custom resource before its definition is installed)."""


async def follow(client: KubeClient, resource: ResourceType | Discover, listed: Listed, changed: Changed) -> None:
    """Follow `resource`, or the one `resource()` discovers: discovery is retried like a failed list."""
    delay = 0.5
    while True:
        try:
            if not isinstance(resource, ResourceType):
                resource = await resource()
            items, version = await client.list_at(resource)
            await listed(items)
            delay = 0.5
            while True:
                async for kind, obj in client.watch(resource, version):
                    version = obj.get("metadata", {}).get("resourceVersion") or version
                    if kind != "BOOKMARK":
                        await changed(kind, obj)
        except WatchExpired:
            log.info("watch expired; listing again", resource=_plural(resource))
            continue
        except (KubeUnavailable, KubeRefused, ValueError) as exc:
            log.warning("watch failed; retrying", resource=_plural(resource), error=str(exc), retry_in=round(delay, 2))
        except Exception:  # a bug here must not stop the agent serving its gateways
            log.exception("watch failed; retrying", resource=_plural(resource))
        await asyncio.sleep(delay * random.uniform(0.8, 1.2))
        delay = min(delay * 2, 30.0)


def _plural(resource: ResourceType | Discover) -> str:
    return resource.plural if isinstance(resource, ResourceType) else "(not discovered yet)"
