"""Quota grants (RLQS): a window's shares never add up to more than its limit, follow demand, and start over
with each window."""

from __future__ import annotations

import asyncio

from envoy.service.rate_limit_quota.v3 import rlqs_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from meshplane.dataplane import QUOTA_DOMAIN_API, QUOTA_DOMAIN_APPLICATION, QUOTA_DOMAIN_OPERATION
from meshplane.proto.v1 import rls_conf_pb2
from meshplane.ratelimiter.limits import compile_domains
from meshplane.ratelimiter.memory import MemoryCounters
from meshplane.ratelimiter.quotas import QuotaBook, QuotaSession

NOW = 1_800_000_000.0  # the top of a minute
_Strategy = rlqs_pb2.RateLimitQuotaResponse.BucketAction


def book(per_minute: int = 10) -> QuotaBook:
    node = rls_conf_pb2.RateLimitDescriptor(
        key="api",
        value="shop/orders",
        rate_limit=rls_conf_pb2.RateLimitPolicy(unit=rls_conf_pb2.MINUTE, requests_per_unit=per_minute),
        descriptors=[
            rls_conf_pb2.RateLimitDescriptor(
                key="operation",
                value="GET /items",
                rate_limit=rls_conf_pb2.RateLimitPolicy(unit=rls_conf_pb2.SECOND, requests_per_unit=3),
            ),
            rls_conf_pb2.RateLimitDescriptor(
                key="application",
                value="shop/web",
                rate_limit=rls_conf_pb2.RateLimitPolicy(unit=rls_conf_pb2.HOUR, requests_per_unit=2),
            ),
        ],
    )
    config = rls_conf_pb2.RateLimitConfig(name="meshplane", domain="meshplane", descriptors=[node])
    domains = compile_domains({"meshplane": config})
    return QuotaBook(MemoryCounters(), lambda: domains)


def report(
    allowed: int, denied: int = 0, elapsed: int = 0, domain: str = QUOTA_DOMAIN_API, **bucket: str
) -> rlqs_pb2.RateLimitQuotaUsageReports:
    usage = rlqs_pb2.RateLimitQuotaUsageReports.BucketQuotaUsage(
        bucket_id=rlqs_pb2.BucketId(bucket=bucket or {"api": "shop/orders"}),
        num_requests_allowed=allowed,
        num_requests_denied=denied,
    )
    usage.time_elapsed.seconds = elapsed
    return rlqs_pb2.RateLimitQuotaUsageReports(domain=domain, bucket_quota_usages=[usage])


def session(of: QuotaBook) -> QuotaSession:
    held = QuotaSession(of)
    of.sessions.add(held)
    return held


def tokens(actions: list[_Strategy]) -> int | str:
    """What the last action leaves the gateway: its token bucket's size, or its blanket rule."""
    strategy = actions[-1].quota_assignment_action.rate_limit_strategy
    if strategy.HasField("token_bucket"):
        return strategy.token_bucket.max_tokens
    return strategy.BlanketRule.Name(strategy.blanket_rule)


def test_a_first_report_gets_the_window_less_what_was_let_through_before_as_a_full_bucket() -> None:
    gateway = session(book())

    actions = asyncio.run(gateway.on_report(report(allowed=1), NOW + 5))

    assert [tokens(actions[:1]), tokens(actions)] == ["DENY_ALL", 9]  # a blanket first: the bucket starts full
    assert actions[-1].quota_assignment_action.assignment_time_to_live.seconds == 55 + 2
    refill = actions[-1].quota_assignment_action.rate_limit_strategy.token_bucket
    assert refill.tokens_per_fill.value == 1 and refill.fill_interval.seconds >= 10 * 365 * 86_400


def test_the_next_window_grants_again_and_an_exhausted_window_denies() -> None:
    gateway = session(book(per_minute=4))

    async def run() -> list[int | str]:
        first = await gateway.on_report(report(allowed=1), NOW)
        assert gateway.next_window_end() == NOW + 60
        within = await gateway.on_windows(NOW + 30)
        later = await gateway.on_windows(NOW + 60.01)
        return [tokens(first), len(within), tokens(later)]

    assert asyncio.run(run()) == [3, 0, 4]


def test_two_gateways_share_by_demand_and_never_beyond_the_limit() -> None:
    shared = book(per_minute=10)
    busy, quiet = session(shared), session(shared)

    async def run() -> tuple[int | str, int | str]:
        await busy.on_report(report(allowed=0), NOW)  # registered, nothing let through yet
        await quiet.on_report(report(allowed=0), NOW)
        busy.buckets[next(iter(busy.buckets))].rate, quiet.buckets[next(iter(quiet.buckets))].rate = 9.0, 1.0
        return tokens(await busy.on_windows(NOW + 60.01)), tokens(await quiet.on_windows(NOW + 60.01))

    assert asyncio.run(run()) == (9, 1)


def test_a_gateway_that_refused_gets_more_of_what_is_left() -> None:
    shared = book(per_minute=10)
    first, second = session(shared), session(shared)

    async def run() -> list[int | str]:
        a = await first.on_report(report(allowed=0), NOW)  # all 10: nobody else holds the bucket
        b = await second.on_report(report(allowed=0), NOW)  # nothing left this window
        more = await second.on_report(report(allowed=0, denied=5, elapsed=5), NOW + 5)
        return [tokens(a), tokens(b), len(more)]

    assert asyncio.run(run()) == [10, "DENY_ALL", 0]


def test_an_operation_bucket_finds_its_limit_and_an_unknown_one_is_let_through() -> None:
    gateway = session(book())

    async def run() -> tuple[int | str, int | str]:
        operation = report(allowed=0, domain=QUOTA_DOMAIN_OPERATION, operation="shop/orders GET /items")
        unknown = report(allowed=3, api="shop/unlimited")
        return tokens(await gateway.on_report(operation, NOW)), tokens(await gateway.on_report(unknown, NOW))

    assert asyncio.run(run()) == (3, "ALLOW_ALL")


@settings(max_examples=50, deadline=None)
@given(
    limit=st.integers(1, 50),
    rates=st.lists(st.floats(0.0, 100.0), min_size=1, max_size=5),
    before=st.lists(st.integers(0, 3), min_size=5, max_size=5),
)
def test_grants_never_exceed_what_the_window_has_left_and_only_first_requests_overshoot(
    limit: int, rates: list[float], before: list[int]
) -> None:
    shared = book(per_minute=limit)
    gateways = [session(shared) for _ in rates]

    async def run() -> int:
        for gateway, rate, early in zip(gateways, rates, before, strict=False):
            await gateway.on_report(report(allowed=early), NOW)
            gateway.buckets[next(iter(gateway.buckets))].rate = rate
        for gateway in gateways:  # each refused some: each asks for more of what is left
            await gateway.on_report(report(allowed=0, denied=1, elapsed=5), NOW + 5)
        return sum(bucket.granted for gateway in gateways for bucket in gateway.buckets.values())

    early = before[: len(rates)]
    granted = asyncio.run(run())
    assert granted <= max(0, limit - early[0]), "a grant beyond what the window has left"
    # What the gateways let through before their first grants is the overshoot, and all of it.
    assert granted + sum(early) <= max(limit, early[0]) + sum(early[1:])


def test_a_caller_bucket_finds_its_applications_limit_and_another_caller_is_let_through() -> None:
    gateway = session(book())

    async def run() -> tuple[int | str, int | str]:
        web = report(allowed=0, domain=QUOTA_DOMAIN_APPLICATION, api="shop/orders", application="shop/web")
        other = report(allowed=0, domain=QUOTA_DOMAIN_APPLICATION, api="shop/orders", application="shop/cli")
        return tokens(await gateway.on_report(web, NOW)), tokens(await gateway.on_report(other, NOW))

    assert asyncio.run(run()) == (2, "ALLOW_ALL")


def test_a_changed_limit_holds_from_the_next_window_on_a_stream_already_open() -> None:
    domains = {"held": book(per_minute=10).domains()}
    shared = QuotaBook(MemoryCounters(), lambda: domains["held"])
    gateway = session(shared)

    async def run() -> tuple[int | str, int | str]:
        before = tokens(await gateway.on_report(report(allowed=0), NOW))
        domains["held"] = book(per_minute=3).domains()  # the agent sent the rate limiter a new limit
        return before, tokens(await gateway.on_windows(NOW + 60.01))

    assert asyncio.run(run()) == (10, 3)


def test_gateways_of_two_replicas_share_a_window_by_the_demand_both_counted() -> None:
    store = MemoryCounters()
    domains = book(per_minute=10).domains()
    replicas = [QuotaBook(store, lambda: domains), QuotaBook(store, lambda: domains)]
    busy, quiet = session(replicas[0]), session(replicas[1])

    async def run() -> tuple[int | str, int | str]:
        await busy.on_report(report(allowed=1), NOW)  # first: the window's 10, less its first request
        await quiet.on_report(report(allowed=1), NOW)  # nothing left for it this window
        await busy.on_report(report(allowed=9, denied=70, elapsed=5), NOW + 5)
        await quiet.on_report(report(allowed=0, denied=9, elapsed=5), NOW + 5)
        # The next window: each replica reads both gateways' demand from the store.
        return tokens(await busy.on_windows(NOW + 60.01)), tokens(await quiet.on_windows(NOW + 60.01))

    assert asyncio.run(run()) == (9, 1)  # 80 of 90 requests asked, and 10: ceil(8.9), then what is left


def test_an_idle_gateway_takes_the_least_share_when_others_are_busy() -> None:
    store = MemoryCounters()
    domains = book(per_minute=10).domains()
    busy, idle = session(QuotaBook(store, lambda: domains)), session(QuotaBook(store, lambda: domains))

    async def run() -> tuple[int | str, int | str]:
        await idle.on_report(report(allowed=0), NOW)
        await busy.on_report(report(allowed=0, denied=50, elapsed=5), NOW + 5)
        return tokens(await idle.on_windows(NOW + 60.01)), tokens(await busy.on_windows(NOW + 60.01))

    assert asyncio.run(run()) == (1, 9)
