"""Counters in Redis, shared by every replica pointed at it.

Requests that arrive together share one round trip: each call queues its hits, and one script call
per event-loop turn counts every queued hit (setting a counter's expiry when it is new) and hands
each caller its totals.

Under a large limit a replica also reserves ahead: when it has to go to Redis for a counter, the
script adds up to 1/`LEASE_FRACTION` of the limit beyond the hit itself, never past the limit, and
the replica answers the next hits on that counter from what it reserved, without a round trip. So a
busy counter costs one Redis call per reservation rather than one per request. Nothing is ever let
through beyond the limit: reserved hits count in Redis as taken. What a replica reserved and did
not use by the end of the window was refused to no one but also served to no one, so a fleet of R
replicas may start refusing up to R/`LEASE_FRACTION` of the limit early. A limit below
`LEASE_FRACTION` is counted exactly, one hit at a time.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import quote

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from meshplane.ratelimiter.counters import CountersUnavailable, Hit

KEY_PREFIX = "meshplane:rl:"
LEASE_FRACTION = 100
"""A reservation is at most this fraction of the limit: the most a replica may hold unused."""
COUNT = """
local out = {}
for i, key in ipairs(KEYS) do
  local at = 4 * (i - 1)
  local addend = tonumber(ARGV[at + 1])
  local ahead = tonumber(ARGV[at + 2])
  if ahead > 0 then
    local room = tonumber(ARGV[at + 3]) - tonumber(redis.call('GET', key) or '0') - addend
    ahead = math.max(math.min(ahead, room), 0)
  end
  local total = redis.call('INCRBY', key, addend + ahead)
  if total == addend + ahead then
    redis.call('EXPIRE', key, ARGV[at + 4])
  end
  out[2 * i - 1] = total
  out[2 * i] = ahead
end
return out
"""
"""Per key (addend, hits to reserve ahead, limit, seconds to expiry): the total after counting, and how
many hits were reserved ahead (fewer than asked when the limit is near, none once it is reached)."""


def redis_key(hit: Hit) -> str:
    """`meshplane:rl:<domain>:<key>:<value>…:<window start>`, each part percent-encoded so none can
    run into the next."""
    return f"{_counter_prefix(hit.key)}:{hit.window_start}"


@functools.lru_cache(maxsize=4096)
def _counter_prefix(key: tuple[str, ...]) -> str:
    """Encoded once per counter, not on every request that hits it."""
    return KEY_PREFIX + ":".join(quote(part, safe="") for part in key)


@dataclass(slots=True)
class _Lease:
    """Hits this replica reserved on one counter and has not handed out yet."""

    top: int
    """The counter's total in Redis after this replica's latest reservation on it."""
    unspent: int
    window_end: int


@dataclass
class _Batch:
    keys: list[str] = field(default_factory=list)
    args: list[int] = field(default_factory=list)
    waiters: list[tuple[int, int, asyncio.Future[list[tuple[int, int]]]]] = field(default_factory=list)
    """(first index, count, future) of each caller's hits in `keys`."""


class RedisCounters:
    """Every call is bounded by `timeout` seconds and never retried (a retried INCRBY could count
    twice): when Redis is slow or away the callers get CountersUnavailable at once, except for hits
    this replica can still answer from what it reserved."""

    def __init__(self, url: str, timeout: float = 0.5) -> None:
        self._timeout = timeout
        self._redis = Redis.from_url(
            url,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
        )
        self._script = self._redis.register_script(COUNT)
        self._batch: _Batch | None = None
        self._flushes: set[asyncio.Task[None]] = set()
        self._leases: dict[str, _Lease] = {}
        self._sweep_at = 0

    async def increment(self, hits: Sequence[Hit], now: int) -> list[int]:
        self._forget_ended(now)
        totals = [0] * len(hits)
        missing: list[tuple[int, str, Hit]] = []
        for index, hit in enumerate(hits):
            key = redis_key(hit)
            lease = self._leases.get(key)
            if lease is not None and lease.unspent >= hit.addend:
                lease.unspent -= hit.addend
                totals[index] = lease.top - lease.unspent
            else:
                missing.append((index, key, hit))
        if not missing:
            return totals
        counted = await self._count(missing, now)
        for (index, key, hit), (total, ahead) in zip(missing, counted, strict=True):
            lease = self._leases.get(key)
            if lease is None:
                if not ahead:
                    totals[index] = total
                    continue
                lease = self._leases[key] = _Lease(total, 0, hit.window_end)
            lease.top = max(lease.top, total)
            lease.unspent += ahead
            totals[index] = lease.top - lease.unspent
        return totals

    def _count(self, missing: Sequence[tuple[int, str, Hit]], now: int) -> asyncio.Future[list[tuple[int, int]]]:
        """Queue hits for this loop turn's script call; resolves to (total, reserved ahead) per hit."""
        if self._batch is None:
            self._batch = _Batch()
            flush = asyncio.create_task(self._flush())
            self._flushes.add(flush)
            flush.add_done_callback(self._flushes.discard)
        batch = self._batch
        done: asyncio.Future[list[tuple[int, int]]] = asyncio.get_running_loop().create_future()
        batch.waiters.append((len(batch.keys), len(missing), done))
        for _, key, hit in missing:
            batch.keys.append(key)
            batch.args += [hit.addend, hit.limit // LEASE_FRACTION, hit.limit, max(hit.window_end - now, 1)]
        return done

    async def _flush(self) -> None:
        """Runs once the callers of this loop turn have queued their hits."""
        await asyncio.sleep(0)
        batch, self._batch = self._batch, None
        assert batch is not None
        try:
            async with asyncio.timeout(self._timeout):
                out = [int(value) for value in await self._script(keys=batch.keys, args=batch.args)]
        except (RedisError, OSError, TimeoutError) as exc:
            failure = CountersUnavailable(f"redis: {str(exc) or type(exc).__name__}")
            for _, _, done in batch.waiters:
                if not done.done():
                    done.set_exception(failure)
            return
        pairs = list(zip(out[0::2], out[1::2], strict=True))
        for first, count, done in batch.waiters:
            if not done.done():
                done.set_result(pairs[first : first + count])

    def _forget_ended(self, now: int) -> None:
        """Reservations die with their window, looked over at most once a second."""
        if now < self._sweep_at:
            return
        self._sweep_at = now + 1
        for key in [key for key, lease in self._leases.items() if lease.window_end <= now]:
            del self._leases[key]

    async def close(self) -> None:
        for flush in list(self._flushes):
            await asyncio.gather(flush, return_exceptions=True)
        await self._redis.aclose()
