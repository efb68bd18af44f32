"""Counters in Redis, shared by every replica pointed at it.

Requests that arrive together share one round trip: each call queues its hits, and one script call
per event-loop turn increments every queued counter (setting its expiry when it is new) and hands
each caller its totals. Under load that is one Redis command for many requests instead of four per
request, which is most of what a global limit costs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import quote

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from meshplane.ratelimiter.counters import CountersUnavailable, Hit

KEY_PREFIX = "meshplane:rl:"
INCREMENT = """
local totals = {}
for i, key in ipairs(KEYS) do
  local addend = tonumber(ARGV[2 * i - 1])
  local total = redis.call('INCRBY', key, addend)
  if total == addend then
    redis.call('EXPIRE', key, ARGV[2 * i])
  end
  totals[i] = total
end
return totals
"""


def redis_key(hit: Hit) -> str:
    """`meshplane:rl:<domain>:<key>:<value>…:<window start>`, each part percent-encoded so none can
    run into the next."""
    return KEY_PREFIX + ":".join(quote(part, safe="") for part in hit.key) + f":{hit.window_start}"


@dataclass
class _Batch:
    keys: list[str] = field(default_factory=list)
    args: list[int] = field(default_factory=list)
    waiters: list[tuple[int, int, asyncio.Future[list[int]]]] = field(default_factory=list)
    """(first index, count, future) of each caller's hits in `keys`."""


class RedisCounters:
    """Every call is bounded by `timeout` seconds and never retried (a retried INCRBY could count
    twice): when Redis is slow or away the callers get CountersUnavailable at once."""

    def __init__(self, url: str, timeout: float = 0.5) -> None:
        self._timeout = timeout
        self._redis = Redis.from_url(
            url,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
        )
        self._script = self._redis.register_script(INCREMENT)
        self._batch: _Batch | None = None
        self._flushes: set[asyncio.Task[None]] = set()

    async def increment(self, hits: Sequence[Hit], now: int) -> list[int]:
        if not hits:
            return []
        if self._batch is None:
            self._batch = _Batch()
            flush = asyncio.create_task(self._flush())
            self._flushes.add(flush)
            flush.add_done_callback(self._flushes.discard)
        batch = self._batch
        done: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        batch.waiters.append((len(batch.keys), len(hits), done))
        for hit in hits:
            batch.keys.append(redis_key(hit))
            batch.args += [hit.addend, max(hit.window_end - now, 1)]
        return await done

    async def _flush(self) -> None:
        """Runs once the callers of this loop turn have queued their hits."""
        await asyncio.sleep(0)
        batch, self._batch = self._batch, None
        assert batch is not None
        try:
            async with asyncio.timeout(self._timeout):
                totals = [int(total) for total in await self._script(keys=batch.keys, args=batch.args)]
        except (RedisError, OSError, TimeoutError) as exc:
            failure = CountersUnavailable(f"redis: {str(exc) or type(exc).__name__}")
            for _, _, done in batch.waiters:
                if not done.done():
                    done.set_exception(failure)
            return
        for first, count, done in batch.waiters:
            if not done.done():
                done.set_result(totals[first : first + count])

    async def close(self) -> None:
        for flush in list(self._flushes):
            await asyncio.gather(flush, return_exceptions=True)
        await self._redis.aclose()
