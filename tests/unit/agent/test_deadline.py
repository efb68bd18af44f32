"""The agent's deadline acts once when its moment passes, follows every move, and never acts when unset."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from meshplane.agent.deadline import NEVER, Deadline

Act = Callable[[], Awaitable[None]]


class Actions:
    """Counts the runs of the action a deadline is given."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.ran = asyncio.Event()

    async def act(self) -> None:
        self.times.append(time.time())
        self.ran.set()


@contextlib.asynccontextmanager
async def running(deadline: Deadline, action: Act) -> AsyncIterator[None]:
    task = asyncio.create_task(deadline.run(action))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_the_action_runs_once_just_after_the_moment() -> None:
    deadline, actions = Deadline(grace=0.01), Actions()
    moment = time.time() + 0.1

    async with running(deadline, actions.act):
        deadline.move_to(moment)
        await asyncio.wait_for(actions.ran.wait(), 2)
        await asyncio.sleep(0.2)

    assert len(actions.times) == 1
    assert actions.times[0] >= moment
    assert deadline.moment == NEVER


async def test_a_moment_already_past_acts_at_once() -> None:
    deadline, actions = Deadline(), Actions()
    deadline.move_to(time.time() - 10)  # set before the task starts, as the agent's first rebuild does

    async with running(deadline, actions.act):
        await asyncio.wait_for(actions.ran.wait(), 2)

    assert len(actions.times) == 1


async def test_the_last_move_wins() -> None:
    deadline, actions = Deadline(grace=0.01), Actions()

    async with running(deadline, actions.act):
        deadline.move_to(time.time() + 0.05)
        deadline.move_to(time.time() + 0.3)
        await asyncio.sleep(0.15)
        assert actions.times == []
        await asyncio.wait_for(actions.ran.wait(), 2)

    assert len(actions.times) == 1


async def test_no_moment_means_no_action() -> None:
    deadline, actions = Deadline(grace=0.01), Actions()

    async with running(deadline, actions.act):
        deadline.move_to(time.time() + 0.05)
        deadline.move_to(None)
        await asyncio.sleep(0.2)

    assert actions.times == []


async def test_an_action_that_moves_the_deadline_is_run_again_at_the_new_moment() -> None:
    deadline, actions = Deadline(grace=0.01), Actions()

    async def act_and_move() -> None:
        await actions.act()
        if len(actions.times) == 1:
            deadline.move_to(time.time() + 0.05)  # the next key record's end, learnt while rebuilding

    async with running(deadline, act_and_move):
        deadline.move_to(time.time())
        for _ in range(100):
            if len(actions.times) == 2:
                break
            await asyncio.sleep(0.02)

    assert len(actions.times) == 2


async def test_a_failed_action_is_not_repeated_until_the_deadline_moves() -> None:
    deadline, attempts = Deadline(grace=0.01), Actions()

    async def failing() -> None:
        await attempts.act()
        raise RuntimeError("the gateways could not be rebuilt")

    task = asyncio.create_task(deadline.run(failing))
    deadline.move_to(time.time())

    with pytest.raises(RuntimeError):
        await asyncio.wait_for(task, 2)
    assert deadline.moment == NEVER
    assert len(attempts.times) == 1
