"""Who a write is made for, carried with the task that makes it, so the store can keep it with the change.

Every door a write comes in by says who acts before it writes: the north API per request (the token or
OIDC subject, the client's address, the request id and the trace), an agent's reports as `cluster/<name>`,
the rollout driver as `rollout/<name>`. The store reads it when the write is made, in the writer's own task
(the task that commits a group of writes is another one, which contextvars do not follow into).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

SYSTEM = "system"
"""Who a write is recorded as when nothing set an actor: the server's own background work."""


@dataclass(frozen=True)
class Actor:
    who: str
    """`token/<token name>`, `oidc/<subject>`, `cluster/<name>`, `rollout/<name>` or `system`."""
    address: str | None = None
    request_id: str | None = None
    trace_id: str | None = None


_ACTOR: ContextVar[Actor | None] = ContextVar("meshplane_actor", default=None)


@contextlib.contextmanager
def acting_as(actor: Actor) -> Iterator[None]:
    """Writes made inside are recorded as `actor`'s (nested: the innermost actor holds)."""
    token = _ACTOR.set(actor)
    try:
        yield
    finally:
        _ACTOR.reset(token)


def current_actor() -> Actor | None:
    return _ACTOR.get()


def act_as(actor: Actor) -> None:
    """Set the actor for the rest of the current task: for a request's authentication, which runs before its
    handler in the same task, inside the request's own `acting_as` that ends it."""
    _ACTOR.set(actor)
