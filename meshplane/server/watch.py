"""`GET /v1/watch?since=REV`: the change stream as Server-Sent Events, tailing the store's event log."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Query
from sse_starlette.sse import EventSourceResponse

from meshplane.model.registry import REGISTRY, UnknownKind
from meshplane.model.resource import API_VERSION, FieldError
from meshplane.model.stored import StoredObject, to_resource
from meshplane.server.auth.guard import Caller
from meshplane.server.auth.principal import require_project
from meshplane.server.problems import Problem, problem_responses
from meshplane.store.errors import Compacted
from meshplane.store.records import Event
from meshplane.store.store import Store

_Sent = dict[tuple[str, str, str], dict[str, Any]]
"""What a stream last sent of each object, by (kind, project, name)."""
_TYPES = {"create": "ADDED", "update": "MODIFIED", "status": "MODIFIED", "delete": "DELETED"}


async def watch_events(
    store: Store, since: int, kind: str | None = None, project: str | None = None, poll: float = 15.0
) -> AsyncIterator[dict[str, Any]]:
    """Change events after `since`, level-triggered: each event carries the newest state of its object,
    and the later events of a state already sent are skipped (a create then a status update reads
    as ADDED with the status in it). A consumer behind the compaction
    window gets one ERROR event (code 410) and must re-list.

    A DELETED event carries the object as this stream last sent it, so the stream remembers what it sent."""
    last = since
    sent: _Sent = {}
    while True:
        try:
            events, current = await store.changes_since(last)
        except Compacted as exc:
            yield {"type": "ERROR", "code": 410, "message": str(exc), "revision": exc.floor}
            return
        for event in events:
            last = event.revision
            if (kind and event.kind != kind) or (project and event.project != project):
                continue
            if (change := _change(event, current.get((event.kind, event.project, event.name)), sent)) is not None:
                yield change
        if not events:
            await store.wait_for_revision(last, timeout=poll)


def _change(event: Event, stored: StoredObject | None, sent: _Sent) -> dict[str, Any] | None:
    """What to send for one event, given its object as the event's snapshot has it (None: deleted since)."""
    info = REGISTRY.get(event.kind)
    if not info.exposed:
        return None
    key = (event.kind, event.project, event.name)
    if event.op == "delete":
        metadata = {"name": event.name, **({"project": event.project} if event.project else {})}
        last_sent = sent.pop(key, {"apiVersion": API_VERSION, "kind": info.kind, "metadata": metadata})
        obj = {**last_sent, "metadata": {**last_sent["metadata"], "resourceVersion": str(event.revision)}}
    else:
        if stored is None:
            return None
        if key in sent and sent[key]["metadata"]["resourceVersion"] == str(stored.revision):
            return None  # this stream already sent the newest state, under an earlier event of it
        obj = sent[key] = to_resource(info, stored).to_wire()
    return {
        "type": _TYPES[event.op],
        "revision": stored.revision if event.op != "delete" else event.revision,
        "object": obj,
    }


def watch_router(store: Store) -> APIRouter:
    router = APIRouter(tags=["Watch"])

    @router.get(
        "/v1/watch",
        summary="Stream changes as Server-Sent Events",
        response_class=EventSourceResponse,
        responses={200: {"content": {"text/event-stream": {}}}, **problem_responses(400, 404)},
    )
    async def watch(
        principal: Caller,
        since: Annotated[int | None, Query(ge=0, description="Revision to start after; default: now")] = None,
        kind: Annotated[str | None, Query(description="Only this kind (name or plural)")] = None,
        project: Annotated[str | None, Query()] = None,
    ) -> EventSourceResponse:
        try:
            kind_name = REGISTRY.resolve(kind).kind if kind else None
        except UnknownKind as exc:
            raise Problem(400, str(exc), [FieldError(path="kind", message=str(exc))]) from None
        if principal.project is not None:
            require_project(principal, project or principal.project)
            project = principal.project
        current = await store.current_revision()
        # A revision from the future (another server's, or a typo) means "from now", not "wait until then".
        start = current if since is None else min(since, current)

        async def stream() -> AsyncIterator[dict[str, str]]:
            async for change in watch_events(store, start, kind_name, project):
                yield {"event": change["type"], "id": str(change["revision"]), "data": json.dumps(change)}

        return EventSourceResponse(stream(), ping=10)

    return router
