"""One backoff, one retry loop, one supervisor and one HTTP server helper for every process."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import urllib.request

import pytest
from prometheus_client import REGISTRY
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from meshplane.config import RetryPolicy
from meshplane.lifecycle import Backoff, HttpServer, ListenError, Supervisor, TaskFailed, retry_forever, wait_at_most
from meshplane_testing.process import free_port, port_open

FAST = Backoff(initial=0.01, cap=0.04)


def failures(task: str) -> float:
    return REGISTRY.get_sample_value("meshplane_task_failures_total", {"task": task}) or 0.0


def test_the_backoff_is_the_configured_retry_policys() -> None:
    policy = RetryPolicy(initial_backoff=0.5, max_backoff=8.0, backoff_multiplier=3.0)

    assert Backoff.of(policy) == Backoff(initial=0.5, cap=8.0, multiplier=3.0)


def test_delays_grow_exponentially_up_to_the_cap_and_never_below_the_initial_backoff() -> None:
    backoff = Backoff(initial=0.2, cap=5.0, multiplier=2.0)

    assert [backoff.ceiling(n) for n in range(1, 7)] == [0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    for attempt in range(1, 40):
        delays = [backoff.delay(attempt) for _ in range(200)]
        assert all(0.2 <= delay <= backoff.ceiling(attempt) for delay in delays)
    assert len({round(backoff.delay(3), 6) for _ in range(50)}) > 10  # jittered, not one fixed delay


def test_progress_makes_the_next_delay_short_again() -> None:
    retries = Backoff(initial=1.0, cap=100.0).retries()
    for _ in range(5):
        retries.next_delay()

    retries.reset()

    assert 1.0 <= retries.next_delay() <= 2.0


def test_a_backoff_that_could_spin_or_has_no_cap_is_refused() -> None:
    with pytest.raises(ValueError):
        Backoff(initial=0.0, cap=1.0)
    with pytest.raises(ValueError):
        Backoff(initial=2.0, cap=1.0)


async def test_retry_forever_retries_each_failure_after_a_delay_then_returns_the_result() -> None:
    calls: list[float] = []
    loop = asyncio.get_running_loop()

    async def flaky() -> str:
        calls.append(loop.time())
        if len(calls) < 4:
            raise ConnectionError("not yet")
        return "done"

    async with asyncio.timeout(5):
        assert await retry_forever(flaky, what="flaky thing", backoff=FAST, retry_on=(ConnectionError,)) == "done"

    assert len(calls) == 4
    assert all(later - earlier >= 0.009 for earlier, later in itertools.pairwise(calls))


async def test_retry_forever_lets_other_errors_through() -> None:
    async def broken() -> None:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        await retry_forever(broken, what="broken thing", backoff=FAST, retry_on=(ConnectionError,))


async def test_a_restartable_task_that_dies_is_restarted_with_backoff_and_counted() -> None:
    runs: list[float] = []
    loop = asyncio.get_running_loop()
    before = failures("flaky-worker")
    third = asyncio.Event()

    async def worker() -> None:
        runs.append(loop.time())
        if len(runs) == 3:
            third.set()
            await asyncio.Event().wait()
        raise RuntimeError("worker died")

    async with asyncio.timeout(5), Supervisor("test", FAST) as tasks:
        tasks.start("flaky-worker", worker, on_failure="restart")
        await third.wait()

    assert failures("flaky-worker") - before == 2
    assert all(later - earlier >= 0.009 for earlier, later in itertools.pairwise(runs))


async def test_a_critical_task_that_dies_takes_the_process_down_naming_it_and_counted() -> None:
    before = failures("vital-feed")
    others_cancelled = asyncio.Event()

    async def feed() -> None:
        await asyncio.sleep(0.01)
        raise RuntimeError("feed broke")

    async def bystander() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            others_cancelled.set()

    with pytest.raises(TaskFailed) as failed:
        async with asyncio.timeout(5), Supervisor("test process") as tasks:
            tasks.start("vital-feed", feed, on_failure="exit")
            tasks.start("bystander", bystander, on_failure="restart")
            await asyncio.Event().wait()

    assert failed.value.task == "vital-feed"
    assert "vital-feed" in str(failed.value) and "feed broke" in str(failed.value)
    assert others_cancelled.is_set()
    assert failures("vital-feed") - before == 1


async def test_a_critical_task_that_ends_by_itself_takes_the_process_down_too() -> None:
    async def quits() -> None:
        return None

    with pytest.raises(TaskFailed, match="ended by itself"):
        async with asyncio.timeout(5), Supervisor("test") as tasks:
            tasks.start("quitter", quits, on_failure="exit")
            await asyncio.Event().wait()


async def test_leaving_the_block_cancels_every_task_and_an_error_of_the_block_comes_out_as_it_is() -> None:
    cancelled = asyncio.Event()

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    with pytest.raises(LookupError):
        async with asyncio.timeout(5), Supervisor("test") as tasks:
            tasks.start("forever", forever, on_failure="exit")
            await asyncio.sleep(0)
            raise LookupError("the body failed")

    assert cancelled.is_set()


async def test_cancelling_a_supervised_process_cancels_its_tasks_and_propagates() -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def forever() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    async def process() -> None:
        async with Supervisor("test") as tasks:
            tasks.start("forever", forever, on_failure="restart")
            await asyncio.Event().wait()

    running = asyncio.create_task(process())
    await asyncio.wait_for(started.wait(), 5)
    running.cancel()

    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(running, 5)
    assert cancelled.is_set()


def hello_app() -> Starlette:
    async def hello(request: object) -> PlainTextResponse:
        return PlainTextResponse("hello")

    return Starlette(routes=[Route("/", hello)])


async def test_the_http_server_serves_until_cancelled_then_frees_its_port() -> None:
    port = free_port()
    serving = asyncio.create_task(HttpServer(hello_app(), f"127.0.0.1:{port}", what="test API").serve())
    try:
        await asyncio.sleep(0)  # listening from its first step
        body = await asyncio.to_thread(lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).read())
        assert body == b"hello"
    finally:
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(serving, 10)

    assert not port_open(port)


async def test_the_http_server_on_a_taken_port_raises_a_clear_error_and_the_process_goes_on() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        address = f"127.0.0.1:{taken.getsockname()[1]}"

        with pytest.raises(ListenError, match=f"cannot serve the test API on {address}"):
            await asyncio.wait_for(HttpServer(hello_app(), address, what="test API").serve(), 5)

        with pytest.raises(TaskFailed, match=f"test-api failed: cannot serve the test API on {address}"):
            async with asyncio.timeout(5), Supervisor("test") as tasks:
                tasks.start("test-api", HttpServer(hello_app(), address, what="test API").serve, on_failure="exit")
                await asyncio.Event().wait()


async def test_waiting_at_most_gives_what_came_or_none_once_the_time_is_up() -> None:
    ready = asyncio.Event()
    assert await wait_at_most(0.01, ready.wait()) is None
    ready.set()
    assert await wait_at_most(1, ready.wait()) is True


async def test_a_cancel_that_comes_as_the_wait_ends_is_never_lost() -> None:
    """The loop of a task that waits for a wake-up or a timeout must end when the task is cancelled, even when
    the wake-up came in the same turn of the event loop: a lost cancel leaves its process unable to stop."""
    wake = asyncio.Event()
    rounds = 0

    async def loop() -> None:
        nonlocal rounds
        while True:
            rounds += 1
            await wait_at_most(30, wake.wait())
            wake.clear()

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)
    wake.set()
    await asyncio.sleep(0)  # what waits for the event has run; the waiter has not been told yet
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, TimeoutError):
        await asyncio.wait_for(asyncio.shield(task), 1)
    assert task.cancelled(), f"the loop went on after its cancel (round {rounds})"
