"""`eventually`: the first truthy answer, or a TimeoutError that names what was awaited."""

from __future__ import annotations

import itertools

import pytest

from meshplane_testing.eventually import eventually, eventually_async


def test_eventually_returns_the_first_truthy_answer() -> None:
    answers = iter([None, 0, {"state": "Applied"}, {"state": "later"}])
    assert eventually(lambda: next(answers), timeout=1, interval=0) == {"state": "Applied"}


def test_eventually_names_what_it_waited_for_when_time_runs_out() -> None:
    with pytest.raises(TimeoutError, match=r"after 0.05s waiting for the CR"):
        eventually(lambda: False, timeout=0.05, what="the CR", interval=0.01)


def test_eventually_asks_at_least_once_even_without_time() -> None:
    assert eventually(lambda: "done", timeout=0) == "done"


async def test_eventually_async_awaits_a_coroutine_check() -> None:
    counter = itertools.count()

    async def third() -> int:
        return max(0, next(counter) - 1)

    assert await eventually_async(third, timeout=1, interval=0) == 1


async def test_eventually_async_times_out_with_a_sync_check() -> None:
    with pytest.raises(TimeoutError, match="waiting for the report"):
        await eventually_async(lambda: False, timeout=0.05, what="the report", interval=0.01)
