"""A moment at which something must be done again, such as rebuilding the gateways' configuration when the
next key record runs out: moved by whoever learns a new moment, waited for by one task."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable

from meshplane.lifecycle import wait_at_most

NEVER = math.inf


class Deadline:
    """The next moment (a Unix time) to act at; `run(action)` acts once each time it passes.

    Moving it wakes the waiting task, which then waits for the new moment: the last move wins. Acting
    clears it first, so an action that fails is not repeated until the deadline is moved again (by the
    action itself, typically, when it learns the moment after)."""

    def __init__(self, *, grace: float = 0.05, clock: Callable[[], float] = time.time):
        self.grace = grace
        """How long after the moment to act: a record ending at t is gone when looked at after t."""
        self.clock = clock
        self.moment = NEVER
        self._moved = asyncio.Event()

    def move_to(self, moment: float | None) -> None:
        """Act at `moment` (None: never), in place of the moment set before."""
        self.moment = NEVER if moment is None else moment
        self._moved.set()

    async def run(self, action: Callable[[], Awaitable[object]]) -> None:
        """Wait for the deadline and run `action` when it passes, until cancelled."""
        while True:
            self._moved.clear()
            delay = None if self.moment == NEVER else max(0.0, self.moment - self.clock()) + self.grace
            if await wait_at_most(delay, self._moved.wait()):
                continue  # moved: wait for the new moment
            self.moment = NEVER
            await action()
