"""ShouldRateLimit on memory counters with a hand-set clock: counts, windows, statuses and modes."""

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from hypothesis import given
from hypothesis import strategies as st

from meshplane.proto.v1 import rls_conf_pb2
from meshplane.ratelimiter.counters import CountersUnavailable, Hit
from meshplane.ratelimiter.decision import UNLIMITED_REMAINING
from meshplane.ratelimiter.limits import UNIT_SECONDS
from meshplane.ratelimiter.memory import MemoryCounters
from meshplane_testing.ratelimit_factories import OK, OVER_LIMIT, Limiter, config, descriptor, node, policy, request

ORDERS = [("api", "orders")]


async def limiter_of(*descriptors) -> Limiter:
    return await Limiter().load(config("shop", *descriptors))


async def test_the_requests_beyond_the_limit_are_over_it_until_the_next_window() -> None:
    limiter = await limiter_of(node("api", "orders", policy(3, rls_conf_pb2.MINUTE, name="orders")))
    minute = 28_333_334 * 60
    limiter.now = minute + 40.5

    answers = [await limiter.ask(request("shop", ORDERS)) for _ in range(4)]

    assert [a.overall_code for a in answers] == [OK, OK, OK, OVER_LIMIT]
    assert [a.statuses[0].code for a in answers] == [OK, OK, OK, OVER_LIMIT]
    assert [a.statuses[0].limit_remaining for a in answers] == [2, 1, 0, 0]
    status = answers[-1].statuses[0]
    assert (status.current_limit.requests_per_unit, status.current_limit.unit) == (3, status.current_limit.MINUTE)
    assert status.current_limit.name == "orders"
    assert (status.duration_until_reset.seconds, status.duration_until_reset.nanos) == (20, 0)

    limiter.now = minute + 60
    fresh = await limiter.ask(request("shop", ORDERS))
    assert (fresh.overall_code, fresh.statuses[0].limit_remaining) == (OK, 2)
    assert fresh.statuses[0].duration_until_reset.seconds == 60


@given(st.integers(1, 20), st.lists(st.integers(0, 5), min_size=1, max_size=30))
async def test_a_request_is_over_once_the_window_total_passes_the_limit(limit, addends) -> None:
    limiter = await limiter_of(node("api", "orders", policy(limit, rls_conf_pb2.HOUR)))
    limiter.now = 472_223 * 3_600  # the start of an hour: every request falls in it
    total = 0
    for addend in addends:
        total += addend or 1

        answer = await limiter.ask(request("shop", ORDERS, hits_addend=addend))

        assert answer.overall_code == (OVER_LIMIT if total > limit else OK)
        assert answer.statuses[0].limit_remaining == max(0, limit - total)


@given(st.sampled_from(list(UNIT_SECONDS)), st.integers(0, 2**40))
async def test_the_reset_is_the_end_of_the_window_of_now(unit, now) -> None:
    limiter = await limiter_of(node("api", "", policy(1, unit)))
    limiter.now = now + 0.25

    reset = (await limiter.ask(request("shop", ORDERS))).statuses[0].duration_until_reset.seconds

    assert 1 <= reset <= UNIT_SECONDS[unit]
    assert (now + reset) % UNIT_SECONDS[unit] == 0


async def test_each_value_under_a_node_without_value_has_its_own_count() -> None:
    limiter = await limiter_of(node("app", "", policy(1)))

    first = [await limiter.ask(request("shop", [("app", name)])) for name in ("web", "mobile")]
    again = await limiter.ask(request("shop", [("app", "web")]))

    assert [a.overall_code for a in first] == [OK, OK]
    assert again.overall_code == OVER_LIMIT


async def test_one_descriptor_over_its_limit_makes_the_whole_answer_over_it() -> None:
    limiter = await limiter_of(node("api", "orders", policy(1)), node("app", "", policy(100)))
    await limiter.ask(request("shop", ORDERS))

    answer = await limiter.ask(request("shop", [("app", "web")], ORDERS, [("unknown", "x")]))

    assert answer.overall_code == OVER_LIMIT
    assert [s.code for s in answer.statuses] == [OK, OVER_LIMIT, OK]
    assert [s.limit_remaining for s in answer.statuses] == [99, 0, 0]
    assert not answer.statuses[2].HasField("current_limit")


async def test_a_shadow_limit_counts_but_lets_everything_through() -> None:
    limiter = await limiter_of(node("api", "orders", policy(1), shadow_mode=True))

    answers = [await limiter.ask(request("shop", ORDERS)) for _ in range(3)]

    assert [a.overall_code for a in answers] == [OK, OK, OK]
    assert [a.statuses[0].code for a in answers] == [OK, OK, OK]
    assert [a.statuses[0].limit_remaining for a in answers] == [0, 0, 0]
    assert answers[-1].statuses[0].current_limit.requests_per_unit == 1


async def test_an_unlimited_descriptor_is_always_ok_and_counts_nothing() -> None:
    counters = MemoryCounters()
    unlimited = config("shop", node("api", "orders", policy(unit=rls_conf_pb2.UNKNOWN, unlimited=True)))
    limiter = await Limiter(counters).load(unlimited)

    answers = [await limiter.ask(request("shop", ORDERS)) for _ in range(3)]

    assert {(a.overall_code, a.statuses[0].limit_remaining) for a in answers} == {(OK, UNLIMITED_REMAINING)}
    assert len(counters) == 0


async def test_an_unknown_domain_is_ok_without_statuses() -> None:
    limiter = await limiter_of(node("api", "orders", policy(1)))

    answer = await limiter.ask(request("elsewhere", ORDERS, ORDERS))

    assert answer.overall_code == OK
    assert list(answer.statuses) == []


async def test_a_descriptors_own_hits_addend_overrides_the_requests() -> None:
    limiter = await limiter_of(node("api", "orders", policy(10)))

    answer = await limiter.ask(request("shop", descriptor(ORDERS, hits_addend=4), hits_addend=2))
    after = await limiter.ask(request("shop", descriptor(ORDERS, hits_addend=0), hits_addend=2))

    assert answer.statuses[0].limit_remaining == 6
    assert after.statuses[0].limit_remaining == 4


async def test_a_limit_named_in_another_matched_limits_replaces_does_not_apply() -> None:
    limiter = await limiter_of(
        node("api", "orders", policy(1, name="general")),
        node("plan", "gold", policy(100, replaces=[rls_conf_pb2.RateLimitReplace(name="general")])),
    )
    await limiter.ask(request("shop", ORDERS))

    alone = await limiter.ask(request("shop", ORDERS))
    replaced = await limiter.ask(request("shop", ORDERS, [("plan", "gold")]))

    assert alone.overall_code == OVER_LIMIT
    assert replaced.overall_code == OK
    assert not replaced.statuses[0].HasField("current_limit")
    assert replaced.statuses[1].limit_remaining == 99


class Unreachable:
    async def increment(self, hits: list[Hit], now: int) -> list[int]:
        raise CountersUnavailable("redis: connection refused")

    async def close(self) -> None:
        return None


async def test_counters_that_cannot_count_fail_the_call_as_unavailable() -> None:
    limiter = await Limiter(counters=Unreachable()).load(config("shop", node("api", "orders", policy(1))))

    with pytest.raises(GRPCError) as refused:
        await limiter.ask(request("shop", ORDERS))

    assert refused.value.status is Status.UNAVAILABLE
    assert refused.value.message is not None and "connection refused" in refused.value.message
    assert (await limiter.ask(request("other", ORDERS))).overall_code == OK
