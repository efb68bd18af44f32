"""Where hits are counted: the interface both counter stores offer the service."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


class CountersUnavailable(Exception):
    """The counter store could not count in time; the request is answered UNAVAILABLE."""


@dataclass(frozen=True, slots=True)
class Hit:
    """`addend` hits on one counter: `key` (domain, then each entry's key and value) in the fixed
    window starting at `window_start` and ending at `window_end` (Unix seconds), under a limit of
    `limit` hits per window (0: not known, count exactly)."""

    key: tuple[str, ...]
    window_start: int
    window_end: int
    addend: int
    limit: int = 0


class Counters(Protocol):
    async def increment(self, hits: Sequence[Hit], now: int) -> list[int]:
        """Add every hit at once; each counter's total in its window after the addition, in order."""
        ...

    async def close(self) -> None: ...
