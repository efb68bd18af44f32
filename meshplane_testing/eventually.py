"""The one "poll until true" of the tests and benchmarks, for what has no event to wait on."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

TIMEOUT = 10.0
INTERVAL = 0.05


def eventually(
    check: Callable[[], T], *, timeout: float = TIMEOUT, what: str = "the condition", interval: float = INTERVAL
) -> T:
    """The first truthy answer of `check()`, asked every `interval` s; TimeoutError naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        if result := check():
            return result
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


async def eventually_async(
    check: Callable[[], T | Awaitable[T]],
    *,
    timeout: float = TIMEOUT,  # noqa: ASYNC109 - one deadline, as in eventually
    what: str = "the condition",
    interval: float = INTERVAL,
) -> T:
    """`eventually` inside an event loop: sleeps without blocking it, and `check` may be a coroutine function."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result  # type: ignore[return-value]
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)
