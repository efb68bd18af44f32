"""Writes that passed their checks against other objects and have not committed yet.

Some checks look at other objects: an API's routes may not meet another API's, an application
subscribes to an API once, a host or a service port has one claimant. They read what is committed, so
two such writes arriving together would each pass against a store holding neither. Here a write that
might collide with one still in flight in this server waits for it to end, then checks again against
what it left. Writes that cannot collide never wait, so they still share commits.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from meshplane.model.resource import Resource

MightCollide = Callable[[Resource, Resource], bool]
"""Whether two writes could refuse each other: a cheap test that may say yes too often, never too rarely."""


class InFlightWrites:
    def __init__(self, might_collide: MightCollide) -> None:
        self._might_collide = might_collide
        self._writes: dict[asyncio.Future[None], Resource] = {}

    @asynccontextmanager
    async def admitted(self, resource: Resource, check: Callable[[], Awaitable[None]]) -> AsyncIterator[None]:
        """Run `check` (which raises to refuse) until no write in flight might collide with `resource`, then
        hold it in flight for the body of the `async with`, in which it is written."""
        while True:
            await check()
            ahead = [done for done, other in self._writes.items() if self._might_collide(resource, other)]
            if not ahead:
                break
            await asyncio.wait(ahead)
        done = asyncio.get_running_loop().create_future()
        self._writes[done] = resource
        try:
            yield
        finally:
            del self._writes[done]
            done.set_result(None)
