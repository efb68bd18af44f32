"""Counters in a real Redis: shared totals, expiry with the window, one transaction per request, and
a bounded failure when Redis is away or stalls."""

import asyncio
import random
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from meshplane.ratelimiter.counters import CountersUnavailable, Hit
from meshplane.ratelimiter.redis_counters import LEASE_FRACTION, RedisCounters, redis_key
from meshplane_testing.process import free_port
from meshplane_testing.redis import RedisServer, start_redis

NOW = 1_700_000_000


@pytest.fixture
def domain() -> str:
    """A domain of this test's own, so tests sharing the session's Redis never share a counter."""
    return f"t-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_server.url, decode_responses=True)
    yield client
    await client.aclose()


def hit(domain: str, value: str, addend: int = 1, seconds: int = 60, limit: int = 0) -> Hit:
    start = NOW - NOW % seconds
    return Hit((domain, "api", value), start, start + seconds, addend, limit)


async def test_replicas_on_one_redis_share_one_count(redis_server: RedisServer, domain: str) -> None:
    one, two = RedisCounters(redis_server.url), RedisCounters(redis_server.url)
    try:
        assert await one.increment([hit(domain, "orders"), hit(domain, "items", 5)], NOW) == [1, 5]
        assert await two.increment([hit(domain, "orders", 2)], NOW) == [3]
        assert await one.increment([hit(domain, "orders")], NOW) == [4]
    finally:
        await one.close()
        await two.close()


async def test_a_counter_expires_when_its_window_ends(redis_server: RedisServer, redis: Redis, domain: str) -> None:
    counters = RedisCounters(redis_server.url)
    counted = hit(domain, "a/b:c")
    try:
        await counters.increment([counted], NOW)
    finally:
        await counters.close()

    key = redis_key(counted)
    assert key == f"meshplane:rl:{domain}:api:a%2Fb%3Ac:{counted.window_start}"
    assert 0 < await redis.ttl(key) <= counted.window_end - NOW


def script_calls(info: dict) -> int:
    return sum(info.get(name, {}).get("calls", 0) for name in ("cmdstat_evalsha", "cmdstat_eval"))


async def test_the_hits_of_requests_arriving_together_go_in_one_script_call(
    redis_server: RedisServer, redis: Redis, domain: str
) -> None:
    counters = RedisCounters(redis_server.url)
    try:
        await counters.increment([hit(domain, "warm-up")], NOW)
        before = script_calls(await redis.info("commandstats"))

        one = await counters.increment([hit(domain, str(n)) for n in range(5)], NOW)
        together = await asyncio.gather(*(counters.increment([hit(domain, "shared")], NOW) for _ in range(8)))

        assert script_calls(await redis.info("commandstats")) == before + 2
        assert one == [1] * 5
        assert sorted(totals[0] for totals in together) == list(range(1, 9))
    finally:
        await counters.close()


async def test_no_hits_need_no_redis() -> None:
    counters = RedisCounters(f"redis://127.0.0.1:{free_port()}/0")

    assert await counters.increment([], NOW) == []
    await counters.close()


async def test_an_unreachable_redis_fails_at_once(domain: str) -> None:
    counters = RedisCounters(f"redis://127.0.0.1:{free_port()}/0", timeout=0.5)
    started = time.monotonic()
    try:
        with pytest.raises(CountersUnavailable, match=r"^redis: "):
            await counters.increment([hit(domain, "orders")], NOW)
    finally:
        await counters.close()

    assert time.monotonic() - started < 1.0


async def test_a_redis_that_never_answers_fails_within_the_timeout(domain: str) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # accept, never answer

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    counters = RedisCounters(f"redis://127.0.0.1:{port}/0", timeout=0.3)
    started = time.monotonic()
    try:
        with pytest.raises(CountersUnavailable):
            await counters.increment([hit(domain, "orders")], NOW)
    finally:
        await counters.close()
        server.close()
        await server.wait_closed()

    assert time.monotonic() - started < 1.0


async def test_under_a_large_limit_hits_are_reserved_ahead_and_counted_without_a_round_trip(
    redis_server: RedisServer, redis: Redis, domain: str
) -> None:
    counters = RedisCounters(redis_server.url)
    busy = hit(domain, "busy", limit=10 * LEASE_FRACTION)  # reserves 10 beyond each hit that goes to Redis
    try:
        before = script_calls(await redis.info("commandstats"))
        totals = [(await counters.increment([busy], NOW))[0] for _ in range(30)]

        assert totals == list(range(1, 31))
        assert script_calls(await redis.info("commandstats")) == before + 3  # at hits 1, 12 and 23
        assert int(await redis.get(redis_key(busy))) == 33  # taken: 30 counted and 3 still reserved
    finally:
        await counters.close()


async def test_a_reservation_stops_at_the_limit(redis_server: RedisServer, redis: Redis, domain: str) -> None:
    counters = RedisCounters(redis_server.url)
    busy = hit(domain, "near", limit=10 * LEASE_FRACTION)
    await redis.set(redis_key(busy), busy.limit - 5)
    try:
        totals = [(await counters.increment([busy], NOW))[0] for _ in range(6)]

        assert totals == [busy.limit - 4, busy.limit - 3, busy.limit - 2, busy.limit - 1, busy.limit, busy.limit + 1]
        assert int(await redis.get(redis_key(busy))) == busy.limit + 1  # 4 reserved, not 10; then one refused
    finally:
        await counters.close()


@pytest.mark.parametrize("seed", range(4))
async def test_replicas_that_reserve_ahead_never_let_more_than_the_limit_through(
    redis_server: RedisServer, domain: str, seed: int
) -> None:
    limit = 3 * LEASE_FRACTION
    replicas = [RedisCounters(redis_server.url) for _ in range(3)]
    choose = random.Random(seed)
    try:
        let_through = 0
        for _ in range(2 * limit):
            replica = choose.choice(replicas)
            addend = choose.choice((1, 1, 1, 2))
            [total] = await replica.increment([hit(domain, "shared", addend, limit=limit)], NOW)
            let_through += addend if total <= limit else 0
    finally:
        for replica in replicas:
            await replica.close()

    # What a replica reserved and did not use is refused to others: at most 1/LEASE_FRACTION each.
    assert limit - len(replicas) * (limit // LEASE_FRACTION + 1) <= let_through <= limit


async def test_a_limit_below_the_lease_fraction_is_counted_exactly_by_each_replica(
    redis_server: RedisServer, redis: Redis, domain: str
) -> None:
    one, two = RedisCounters(redis_server.url), RedisCounters(redis_server.url)
    small = hit(domain, "small", limit=LEASE_FRACTION - 1)
    try:
        totals = [(await replica.increment([small], NOW))[0] for replica in (one, two, one, two)]

        assert totals == [1, 2, 3, 4]
        assert int(await redis.get(redis_key(small))) == 4
    finally:
        await one.close()
        await two.close()


async def test_reserved_hits_are_answered_while_redis_is_away_and_end_with_their_window(
    tmp_path: Path, domain: str
) -> None:
    busy = hit(domain, "busy", limit=2 * LEASE_FRACTION)
    with start_redis(tmp_path) as own_redis:
        counters = RedisCounters(own_redis.url, timeout=0.3)
        assert await counters.increment([busy], NOW) == [1]
    try:  # Redis has stopped
        assert [(await counters.increment([busy], NOW))[0] for _ in range(2)] == [2, 3]
        with pytest.raises(CountersUnavailable):
            await counters.increment([busy], NOW)
        with pytest.raises(CountersUnavailable):
            await counters.increment([busy], busy.window_end)  # the next window has no reservation
    finally:
        await counters.close()
