"""`envoy.service.rate_limit_quota.v3.RateLimitQuotaService`: one stream per gateway quota filter, answering its
usage reports and pushing each window's grants as windows end (see `quotas`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from envoy.service.rate_limit_quota.v3 import rlqs_pb2
from grpclib.server import Stream

from meshplane.callout_server import Bidirectional
from meshplane.lifecycle import wait_at_most
from meshplane.observability.logging import get_logger
from meshplane.ratelimiter.counters import Counters, CountersUnavailable
from meshplane.ratelimiter.quotas import QuotaBook, QuotaSession, responses
from meshplane.ratelimiter.table import LimitTable

log = get_logger("meshplane.ratelimiter")
_STREAM = rlqs_pb2.DESCRIPTOR.services_by_name["RateLimitQuotaService"].methods_by_name["StreamRateLimitQuotas"]
_ENDED = object()
WINDOW_SLACK = 0.005
"""Seconds past a window's end its next grants are made, so the clock reads the new window."""


class QuotaService:
    def __init__(self, table: LimitTable, counters: Counters, clock: Callable[[], float] = time.time) -> None:
        self._book = QuotaBook(counters, lambda: dict(table.domains))
        self._clock = clock

    def methods(self) -> list[Bidirectional]:
        return [Bidirectional(_STREAM, self.stream)]

    async def stream(self, stream: Stream[Any, Any]) -> None:
        session = QuotaSession(self._book)
        self._book.sessions.add(session)
        reports: asyncio.Queue[Any] = asyncio.Queue()

        async def read() -> None:
            async for report in stream:
                reports.put_nowait(report)
            reports.put_nowait(_ENDED)

        reader = asyncio.create_task(read())
        try:
            while True:
                end = session.next_window_end()
                timeout = None if end is None else max(0.0, end - self._clock()) + WINDOW_SLACK
                report = await wait_at_most(timeout, reports.get())
                if report is _ENDED:
                    return
                try:
                    if report is None:
                        actions = await session.on_windows(self._clock())
                    else:
                        actions = await session.on_report(report, self._clock())
                except CountersUnavailable as exc:
                    # No grant without a reservation: the gateway keeps what it holds, then its failure mode.
                    log.warning("quota not granted: the counters are unavailable", error=str(exc))
                    continue
                for response in responses(actions):
                    await stream.send_message(response)
        finally:
            reader.cancel()
            self._book.sessions.discard(session)
