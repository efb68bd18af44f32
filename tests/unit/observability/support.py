"""Reading this process's Prometheus registry, as a scrape would see it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from prometheus_client import REGISTRY


def sample(name: str, **labels: str) -> float:
    """The current value of one sample; 0.0 while it has never been recorded."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


def present(name: str, **labels: str) -> bool:
    """Whether the sample is exported at all (a removed gauge label is not)."""
    return REGISTRY.get_sample_value(name, labels) is not None


async def eventually(check: Callable[[], bool], seconds: float = 2.0) -> None:
    """Until `check()` holds: for what another task records a moment later, with nothing to wait on."""
    for _ in range(int(seconds / 0.01)):
        if check():
            return
        await asyncio.sleep(0.01)
    raise TimeoutError(f"not true within {seconds}s")
