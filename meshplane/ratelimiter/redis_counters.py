"""Counters in Redis, shared by every replica pointed at it: one MULTI round trip per request."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from urllib.parse import quote

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from meshplane.ratelimiter.counters import CountersUnavailable, Hit

KEY_PREFIX = "meshplane:rl:"


def redis_key(hit: Hit) -> str:
    """`meshplane:rl:<domain>:<key>:<value>…:<window start>`, each part percent-encoded so none can
    run into the next."""
    return KEY_PREFIX + ":".join(quote(part, safe="") for part in hit.key) + f":{hit.window_start}"


class RedisCounters:
    """INCRBY and EXPIRE for every hit of a request in one transaction.

    Every call is bounded by `timeout` seconds and never retried (a retried INCRBY could count
    twice): when Redis is slow or away the caller gets CountersUnavailable at once.
    """

    def __init__(self, url: str, timeout: float = 0.5) -> None:
        self._timeout = timeout
        self._redis = Redis.from_url(
            url,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
        )

    async def increment(self, hits: Sequence[Hit], now: int) -> list[int]:
        if not hits:
            return []
        try:
            async with asyncio.timeout(self._timeout):
                async with self._redis.pipeline(transaction=True) as pipe:
                    for hit in hits:
                        key = redis_key(hit)
                        pipe.incrby(key, hit.addend)
                        pipe.expire(key, max(hit.window_end - now, 1))
                    replies = await pipe.execute()
        except (RedisError, OSError, TimeoutError) as exc:
            raise CountersUnavailable(f"redis: {str(exc) or type(exc).__name__}") from exc
        return [int(total) for total in replies[::2]]

    async def close(self) -> None:
        await self._redis.aclose()
