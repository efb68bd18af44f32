"""How every meshplane process keeps trying, runs its tasks and serves HTTP: one backoff, one supervisor.

- `Backoff`: exponential delays with full jitter and a cap, built from the configured `RetryPolicy`,
  so a loop that waits for the server backs off the way gRPC's own retries do.
- `retry_forever()`: for what must keep trying until it works; every failure is logged once, with the
  delay before the next attempt, and no attempt follows another without one.
- `Supervisor`: the tasks of a process on one `asyncio.TaskGroup`. Each task declares what its death
  means: it is restarted with backoff, or it takes the process down (`TaskFailed`, a non-zero exit).
  Either way it is logged and counted in `meshplane_task_failures_total{task}`.
- `HttpServer`: a Starlette or FastAPI app on uvicorn, on a socket bound here, so a port in use is a
  `ListenError` and not uvicorn's own exit of the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import time
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Self, TypeVar

import uvicorn

from meshplane.config import RetryPolicy, split_address
from meshplane.observability.logging import get_logger
from meshplane.observability.metrics import TASK_FAILURES

log = get_logger("meshplane.lifecycle")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delays between attempts: the n-th (from 1) is drawn uniformly between `initial` and
    min(`cap`, `initial` * `multiplier` ** n). Full jitter spreads the clients of a server that comes back;
    the floor at `initial` keeps a retry from ever following a failure at once."""

    initial: float = 0.2
    cap: float = 5.0
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.initial <= self.cap or self.multiplier < 1:
            raise ValueError(f"backoff needs 0 < initial <= cap and multiplier >= 1, not {self}")

    @classmethod
    def of(cls, policy: RetryPolicy) -> Backoff:
        """The backoff of the configured retry policy: its initial and largest backoff, and its multiplier."""
        return cls(policy.initial_backoff, max(policy.initial_backoff, policy.max_backoff), policy.backoff_multiplier)

    def ceiling(self, attempt: int) -> float:
        """The largest delay after the `attempt`-th failure in a row (from 1)."""
        return min(self.cap, self.initial * self.multiplier ** min(attempt, 64))

    def delay(self, attempt: int) -> float:
        """A delay after the `attempt`-th failure in a row (from 1)."""
        return random.uniform(self.initial, self.ceiling(attempt))

    def retries(self) -> Retries:
        return Retries(self)


DEFAULT_BACKOFF = Backoff.of(RetryPolicy())
"""For processes with no retry policy of their own to configure (the enforcer, the rate limiter, the server)."""


class Retries:
    """The failures in a row of one thing that keeps trying: each makes the next delay longer, and progress
    (`reset`) makes it short again. For loops whose attempts never simply succeed (a stream, a watch)."""

    def __init__(self, backoff: Backoff):
        self.backoff = backoff
        self.failures = 0

    def next_delay(self) -> float:
        self.failures += 1
        return self.backoff.delay(self.failures)

    def reset(self) -> None:
        self.failures = 0


def describe(exc: BaseException) -> str:
    """An exception in one line: its message, or its type when it has none (gRPC errors: code and details)."""
    code, details = getattr(exc, "code", None), getattr(exc, "details", None)
    if callable(code) and callable(details):
        code_name = getattr(code(), "name", code())
        return f"{code_name}: {details()}" if details() else str(code_name)
    return str(exc) or type(exc).__name__


async def retry_forever(
    attempt: Callable[[], Awaitable[T]],
    *,
    what: str,
    backoff: Backoff,
    retry_on: tuple[type[Exception], ...] = (Exception,),
    expected: tuple[type[Exception], ...] | None = None,
    logger: Any = log,
) -> T:
    """`attempt()` until it returns, sleeping `backoff` between failures; returns what it returned.

    A failure of one of `retry_on` is logged as a warning (`what`, the error, the delay); one that is not
    among the `expected` failures (default: `retry_on`) is logged with its traceback, as a bug. Others,
    and cancellation, propagate."""
    retries = backoff.retries()
    while True:
        try:
            return await attempt()
        except retry_on as exc:
            delay = retries.next_delay()
            traceback = None if isinstance(exc, expected or retry_on) else exc
            logger.warning(
                f"{what} failed; retrying",
                error=describe(exc),
                attempt=retries.failures,
                retry_in=round(delay, 2),
                exc_info=traceback,
            )
        await asyncio.sleep(delay)


async def wait_at_most(seconds: float | None, awaitable: Awaitable[T]) -> T | None:
    """What `awaitable` gives, or None once `seconds` passed (None: no limit). Unlike `asyncio.wait_for`, the
    awaitable runs in the calling task, so a cancel that comes as it completes is never taken for its result."""
    try:
        async with asyncio.timeout(seconds):
            return await awaitable
    except TimeoutError:
        return None


OnFailure = Literal["restart", "exit"]
"""What a task's death means: `restart` it with backoff, or `exit`: the process cannot go on without it."""


class TaskFailed(Exception):
    """A task its process cannot run without died (or ended): the process stops, naming it and why."""

    def __init__(self, process: str, task: str, cause: BaseException | None):
        self.process, self.task, self.cause = process, task, cause
        why = describe(cause) if cause is not None else "it ended by itself"
        super().__init__(f"the {process} stopped: its task {task} failed: {why}")


class Supervisor:
    """The tasks of one process, on one TaskGroup: `async with Supervisor("agent") as tasks:` then
    `tasks.start(name, run, on_failure=...)` for each. Leaving the block cancels every task and waits for
    them; a task declared `exit` that dies cancels the block too, which then raises `TaskFailed`. An error
    of the block itself comes out as it is."""

    def __init__(self, process: str, backoff: Backoff = DEFAULT_BACKOFF):
        self.process = process
        self.backoff = backoff
        self._group = asyncio.TaskGroup()
        self._tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> Self:
        await self._group.__aenter__()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for task in self._tasks:
            task.cancel()
        try:
            await self._group.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group:
            failed, _ = group.split(TaskFailed)
            if failed is not None:
                raise _first(failed) from None
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise

    def start(self, name: str, run: Callable[[], Awaitable[object]], *, on_failure: OnFailure) -> asyncio.Task[None]:
        """Run `run()` as the task `name`; `on_failure` says what its death means (see OnFailure)."""
        task = self._group.create_task(self._watch(name, run, on_failure), name=name)
        self._tasks.append(task)
        return task

    async def _watch(self, name: str, run: Callable[[], Awaitable[object]], on_failure: OnFailure) -> None:
        retries = self.backoff.retries()
        while True:
            started = time.monotonic()
            try:
                await run()
                if on_failure == "restart":
                    return  # done: a task that may be restarted may also finish
                cause: Exception | None = None
            except Exception as exc:
                cause = exc
            TASK_FAILURES.labels(name).inc()
            if on_failure == "exit":
                log.error(
                    "task failed; the process stops", process=self.process, task=name, error=_why(cause), exc_info=cause
                )
                raise TaskFailed(self.process, name, cause)
            if time.monotonic() - started > self.backoff.cap:
                retries.reset()  # it ran a good while: this is a new failure, not the next of a series
            delay = retries.next_delay()
            log.error(
                "task failed; restarting",
                process=self.process,
                task=name,
                error=_why(cause),
                retry_in=round(delay, 2),
                exc_info=cause,
            )
            await asyncio.sleep(delay)


def _why(cause: BaseException | None) -> str:
    return describe(cause) if cause is not None else "it ended by itself"


def _first(group: BaseExceptionGroup[TaskFailed]) -> TaskFailed:
    first = group.exceptions[0]
    return first if isinstance(first, TaskFailed) else _first(first)


class ListenError(OSError):
    """An HTTP server cannot listen on its address (in use, not this host's, not allowed)."""


class HttpServeError(RuntimeError):
    """uvicorn stopped serving by itself."""


class _Uvicorn(uvicorn.Server):
    """uvicorn that leaves the process's signals to the process: it stops when its task is cancelled."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


class HttpServer:
    """Serves `app` on `address` for as long as `serve()` runs; cancelling it shuts the server down
    gracefully (requests in flight get `grace` seconds).

    The socket is bound here (`bind()`, or at the start of `serve()`): a port in use raises ListenError
    naming `what` and the address, where uvicorn binding it itself would log and exit the process."""

    def __init__(self, app: Any, address: str, *, what: str, grace: float = 5.0, **config: Any):
        self.address = address
        self.what = what
        self.grace = grace
        self.config = uvicorn.Config(
            app, log_config=None, access_log=False, lifespan="off", timeout_graceful_shutdown=grace, **config
        )
        self._socket: socket.socket | None = None

    def bind(self) -> None:
        """Take the address now (else `serve()` does), so that a process can fail before it starts anything
        else. ListenError when it cannot."""
        if self._socket is not None:
            return
        host, port = split_address(self.address)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            self._socket = socket.create_server((host, port), family=family)
        except OSError as exc:
            raise ListenError(f"cannot serve the {self.what} on {self.address}: {exc.strerror or exc}") from None

    def close(self) -> None:
        """Give the address back, for a process that stops before it served (`serve()` does it otherwise)."""
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    async def serve(self) -> None:
        """Serve until cancelled. HttpServeError when uvicorn stops by itself."""
        self.bind()
        assert self._socket is not None
        listening = [self._socket]
        server = _Uvicorn(self.config)
        try:
            # Awaited here, not in a task of its own, so that uvicorn's sys.exit() reaches this frame.
            await server.serve(sockets=listening)
        except asyncio.CancelledError:
            if server.started:
                server.should_exit = True
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await wait_at_most(self.grace + 1, server.shutdown(sockets=listening))
            raise
        except SystemExit as exc:
            raise HttpServeError(f"the {self.what} on {self.address} could not start (exit {exc.code})") from None
        finally:
            self.close()
        raise HttpServeError(f"the {self.what} on {self.address} stopped serving")
