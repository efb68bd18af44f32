"""Counters in memory: totals per key and window, and nothing kept of a window that has ended."""

from meshplane.ratelimiter.counters import Hit
from meshplane.ratelimiter.memory import MemoryCounters


def hit(key: str, start: int, length: int = 10, addend: int = 1) -> Hit:
    return Hit(("shop", "api", key), start, start + length, addend)


async def test_totals_add_up_per_key_and_window() -> None:
    counters = MemoryCounters()

    first = await counters.increment([hit("a", 100), hit("b", 100, addend=3)], now=101)
    second = await counters.increment([hit("a", 100, addend=2), hit("a", 110)], now=109)

    assert first == [1, 3]
    assert second == [3, 1]


async def test_the_same_key_twice_in_one_request_counts_twice() -> None:
    counters = MemoryCounters()

    assert await counters.increment([hit("a", 100), hit("a", 100)], now=100) == [1, 2]


async def test_counters_of_ended_windows_are_dropped() -> None:
    counters = MemoryCounters()
    await counters.increment([hit(str(n), 100) for n in range(50)], now=100)
    await counters.increment([hit("long", 100, length=60)], now=100)

    await counters.increment([hit("a", 110)], now=110)

    assert len(counters) == 2  # "long" is still in its window, and the new one
    assert await counters.increment([hit("long", 100, length=60)], now=150) == [2]
    await counters.increment([], now=160)
    assert len(counters) == 0
