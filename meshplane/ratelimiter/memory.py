"""Counters in this process's memory: one replica's count, forgotten as soon as a window ends."""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from meshplane.ratelimiter.counters import Hit

_Counter = tuple[tuple[str, ...], int]


class MemoryCounters:
    """Counts per (key, window start). A window's counters are dropped once it has ended, so memory
    holds only the windows in progress."""

    def __init__(self) -> None:
        self._counts: dict[_Counter, int] = {}
        self._ending: dict[int, list[_Counter]] = {}
        self._ends: list[int] = []  # heap of the keys of _ending

    def __len__(self) -> int:
        return len(self._counts)

    async def increment(self, hits: Sequence[Hit], now: int) -> list[int]:
        self._forget_ended(now)
        totals = []
        for hit in hits:
            counter = (hit.key, hit.window_start)
            total = self._counts.get(counter)
            if total is None:
                total = 0
                self._expire_at(hit.window_end, counter)
            self._counts[counter] = total = total + hit.addend
            totals.append(total)
        return totals

    async def close(self) -> None:
        self._counts.clear()
        self._ending.clear()
        self._ends.clear()

    def _expire_at(self, end: int, counter: _Counter) -> None:
        ending = self._ending.get(end)
        if ending is None:
            ending = self._ending[end] = []
            heapq.heappush(self._ends, end)
        ending.append(counter)

    def _forget_ended(self, now: int) -> None:
        while self._ends and self._ends[0] <= now:
            for counter in self._ending.pop(heapq.heappop(self._ends)):
                self._counts.pop(counter, None)
