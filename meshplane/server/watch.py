"""`GET /v1/watch?since=REV`: the change stream as Server-Sent Events, tailing the store's event log."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Query
from sse_starlette.sse import EventSourceResponse

from meshplane.model.registry import REGISTRY
from meshplane.server.objects import to_resource
from meshplane.store.errors import Compacted, NotFound
from meshplane.store.records import Event
from meshplane.store.store import Store

_TYPES = {"create": "ADDED", "update": "MODIFIED", "status": "MODIFIED", "delete": "DELETED"}


async def watch_events(
    store: Store, since: int, kind: str | None = None, project: str | None = None, poll: float = 15.0
) -> AsyncIterator[dict[str, Any]]:
    """Change events after `since`, level-triggered: an event whose object changed again later is
    skipped, since the later event carries the newer state. A consumer behind the compaction
    window gets one ERROR event (code 410) and must re-list."""
    last = since
    while True:
        try:
            events = await store.events_since(last)
        except Compacted as exc:
            yield {"type": "ERROR", "code": 410, "message": str(exc), "revision": exc.floor}
            return
        for event in events:
            last = event.revision
            if (kind and event.kind != kind) or (project and event.project != project):
                continue
            if (change := await _change(store, event)) is not None:
                yield change
        if not events:
            await store.wait_for_revision(last, timeout=poll)


async def _change(store: Store, event: Event) -> dict[str, Any] | None:
    info = REGISTRY.get(event.kind)
    if event.op == "delete":
        metadata = {"name": event.name, **({"project": event.project} if event.project else {})}
        obj: dict[str, Any] = {"kind": info.kind, "metadata": metadata}
    else:
        try:
            stored = await store.get(event.kind, event.project, event.name)
        except NotFound:
            return None
        if stored.revision != event.revision:
            return None
        obj = to_resource(info, stored).to_wire()
    return {"type": _TYPES[event.op], "revision": event.revision, "object": obj}


def watch_router(store: Store) -> APIRouter:
    router = APIRouter(tags=["Watch"])

    @router.get("/v1/watch", summary="Stream changes as Server-Sent Events")
    async def watch(
        since: Annotated[int | None, Query(ge=0, description="Revision to start after; default: now")] = None,
        kind: Annotated[str | None, Query(description="Only this kind (name or plural)")] = None,
        project: Annotated[str | None, Query()] = None,
    ) -> EventSourceResponse:
        kind_name = REGISTRY.resolve(kind).kind if kind else None
        start = since if since is not None else await store.current_revision()

        async def stream() -> AsyncIterator[dict[str, str]]:
            async for change in watch_events(store, start, kind_name, project):
                yield {"event": change["type"], "id": str(change["revision"]), "data": json.dumps(change)}

        return EventSourceResponse(stream(), ping=10)

    return router
