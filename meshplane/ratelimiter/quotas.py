"""Quotas for the gateways' rate_limit_quota filters (RLQS): each gateway gets, per limited bucket and per window
of its limit, a share of the window's requests, and lets through at most that without asking again.

Shares are reserved in the counter store before they are assigned, so the grants of every gateway of every
replica in one window never add up to more than the limit; what a gateway was granted and did not use is
lost at the window's end (early refusal, never overshoot). A share follows each gateway's demand: every
report (every 5 s) adds what the gateway let through and refused to a demand count in the counter store,
per bucket and demand period, which every replica reads, so a gateway's share of a window is its part of
all gateways' recent demand; and a gateway that refused requests in a window gets more of what is left.
Only the requests a gateway lets through before its first assignment of a window, the round trip after
it met a new bucket, are not reserved: they are counted, and they are the overshoot.

Envoy keeps a token bucket it is sent again with the same sizes, and starts one sent after a blanket rule
full: a new window's grant is sent as DENY_ALL then the bucket, which fills it exactly. Its refill is
one token per `NO_REFILL` seconds: nothing within any window.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from envoy.service.rate_limit_quota.v3 import rlqs_pb2
from envoy.type.v3 import ratelimit_strategy_pb2, token_bucket_pb2
from google.protobuf import duration_pb2, wrappers_pb2

from meshplane.dataplane import (
    DESCRIPTOR_API,
    DESCRIPTOR_APPLICATION,
    DESCRIPTOR_OPERATION,
    QUOTA_DOMAIN_API,
    QUOTA_DOMAIN_APPLICATION,
    QUOTA_DOMAIN_OPERATION,
    RATELIMIT_DOMAIN,
)
from meshplane.ratelimiter.counters import Counters, Hit
from meshplane.ratelimiter.limits import DomainLimits, Limit

NO_REFILL = 10 * 365 * 86_400
DEMAND_PERIODS = (10, 60)
"""Seconds per demand count, the limit's window within these bounds (reports come every 5 s); a share
weighs the last two."""
UNLIMITED_TTL = 300
"""Seconds an ALLOW_ALL for a bucket no limit names holds; renewed with each report."""
TTL_GRACE = 2
"""Seconds an assignment outlives its window, so the next window's arrives first."""
_STRATEGY = ratelimit_strategy_pb2.RateLimitStrategy
_Action = rlqs_pb2.RateLimitQuotaResponse.BucketAction


@dataclass(frozen=True, slots=True)
class _Entry:
    key: str
    value: str


def descriptor_entries(quota_domain: str, bucket: dict[str, str]) -> list[_Entry] | None:
    """The rate-limit descriptor a bucket stands for (see `translate.quotas`), or None for one it cannot."""
    if quota_domain == QUOTA_DOMAIN_API and set(bucket) == {DESCRIPTOR_API}:
        return [_Entry(DESCRIPTOR_API, bucket[DESCRIPTOR_API])]
    if quota_domain == QUOTA_DOMAIN_APPLICATION and set(bucket) == {DESCRIPTOR_API, DESCRIPTOR_APPLICATION}:
        return [
            _Entry(DESCRIPTOR_API, bucket[DESCRIPTOR_API]),
            _Entry(DESCRIPTOR_APPLICATION, bucket[DESCRIPTOR_APPLICATION]),
        ]
    if quota_domain == QUOTA_DOMAIN_OPERATION and set(bucket) == {DESCRIPTOR_OPERATION}:
        api, _, operation = bucket[DESCRIPTOR_OPERATION].partition(" ")
        return [_Entry(DESCRIPTOR_API, api), _Entry(DESCRIPTOR_OPERATION, operation)] if operation else None
    return None


@dataclass(slots=True)
class Bucket:
    """One bucket of one gateway: the descriptor it stands for, its window, and what it was granted and used
    there. Its limit is looked up again at each report and window, so a changed limit holds from the next."""

    bucket_id: rlqs_pb2.BucketId
    key: tuple[str, ...]
    entries: list[_Entry] | None
    limit: Limit | None = None
    window_start: int = -1
    granted: int = 0
    used: int = 0
    rate: float = 1.0
    """Requests a second the gateway last reported for it (allowed and refused): its weight while no
    gateway's demand is counted yet."""
    demand: dict[int, int] = field(default_factory=dict)
    """Requests it reported per demand period (the last two)."""


@dataclass
class QuotaBook:
    """What every gateway stream of this process holds, for fair shares across them."""

    counters: Counters
    domains: Callable[[], dict[str, DomainLimits]]
    sessions: set[QuotaSession] = field(default_factory=set)

    def weight_of_others(self, session: QuotaSession, key: tuple[str, ...]) -> float:
        return sum(other.buckets[key].rate for other in self.sessions if other is not session and key in other.buckets)


@dataclass(eq=False)
class QuotaSession:
    """One gateway's quota stream."""

    book: QuotaBook
    domain: str = ""
    buckets: dict[tuple[str, ...], Bucket] = field(default_factory=dict)

    async def on_report(self, report: rlqs_pb2.RateLimitQuotaUsageReports, now: float) -> list[_Action]:
        """Answer a usage report: a grant for each bucket new in its window, more for one that refused."""
        self.domain = report.domain or self.domain
        actions: list[_Action] = []
        for usage in report.bucket_quota_usages:
            bucket = self._bucket(usage.bucket_id)
            self._look_up(bucket)
            elapsed = max(usage.time_elapsed.seconds, 1)
            asked = usage.num_requests_allowed + usage.num_requests_denied
            bucket.rate = asked / elapsed
            await self._count_demand(bucket, asked, now)
            if bucket.limit is None or bucket.limit.unlimited:
                actions.append(_blanket(bucket, _STRATEGY.ALLOW_ALL, UNLIMITED_TTL))
                continue
            current = _window_start(bucket.limit, now)
            if bucket.window_start < 0:  # its first report: what was let through before any grant counts
                await self._reserve(bucket, usage.num_requests_allowed, now, required=True)
                actions += await self._grant(bucket, now)
            elif bucket.window_start != current:  # a window ended before its timer told: a report of the last
                actions += await self._grant(bucket, now)
            else:
                bucket.used += usage.num_requests_allowed
                if usage.num_requests_denied:
                    actions += await self._top_up(bucket, now)
        return actions

    async def on_windows(self, now: float) -> list[_Action]:
        """A fresh grant for every bucket whose window has ended."""
        actions: list[_Action] = []
        for bucket in self.buckets.values():
            self._look_up(bucket)
            limit = bucket.limit
            if limit is None or limit.unlimited or bucket.window_start < 0:
                continue
            if _window_start(limit, now) != bucket.window_start:
                actions += await self._grant(bucket, now)
        return actions

    def next_window_end(self) -> float | None:
        ends = [
            bucket.window_start + bucket.limit.seconds
            for bucket in self.buckets.values()
            if bucket.limit is not None and bucket.window_start >= 0
        ]
        return min(ends, default=None)

    def _bucket(self, bucket_id: rlqs_pb2.BucketId) -> Bucket:
        key = (self.domain, *(part for name in sorted(bucket_id.bucket) for part in (name, bucket_id.bucket[name])))
        bucket = self.buckets.get(key)
        if bucket is None:
            entries = descriptor_entries(self.domain, dict(bucket_id.bucket))
            bucket = self.buckets[key] = Bucket(rlqs_pb2.BucketId(bucket=bucket_id.bucket), key, entries)
        return bucket

    def _look_up(self, bucket: Bucket) -> None:
        """The bucket's limit as the rate limiter holds it now; one gone leaves the bucket unlimited."""
        domain = self.book.domains().get(RATELIMIT_DOMAIN)
        limit = domain.find(bucket.entries) if domain is not None and bucket.entries is not None else None
        if limit != bucket.limit:
            bucket.limit = limit
            if limit is None or limit.unlimited:
                bucket.window_start = -1  # granted again from scratch, should a limit come back

    async def _count_demand(self, bucket: Bucket, asked: int, now: float) -> None:
        if not asked or bucket.limit is None:
            return
        length = _demand_period(bucket.limit)
        period = int(now) - int(now) % length
        bucket.demand = {start: count for start, count in bucket.demand.items() if start >= period - length}
        bucket.demand[period] = bucket.demand.get(period, 0) + asked
        await self.book.counters.increment([_demand_hit(bucket, length, period, asked)], int(now))

    async def _grant(self, bucket: Bucket, now: float) -> list[_Action]:
        assert bucket.limit is not None
        bucket.window_start, bucket.used = _window_start(bucket.limit, now), 0
        bucket.granted = await self._reserve(bucket, await self._share(bucket, now), now)
        return self._assign(bucket, bucket.granted, now)

    async def _top_up(self, bucket: Bucket, now: float) -> list[_Action]:
        more = await self._reserve(bucket, await self._share(bucket, now), now)
        if not more:
            return []
        left = max(bucket.granted - bucket.used, 0)
        bucket.granted += more
        return self._assign(bucket, left + more, now)

    async def _share(self, bucket: Bucket, now: float) -> int:
        """The gateway's part of the limit: its part of every gateway's demand in the last two periods as the
        counter store has it (every replica's), else of the demand this replica's gateways last reported."""
        assert bucket.limit is not None
        length = _demand_period(bucket.limit)
        period = int(now) - int(now) % length
        periods = [period - length, period]
        totals = await self.book.counters.increment([_demand_hit(bucket, length, p, 0) for p in periods], int(now))
        everyone, mine = sum(totals), sum(bucket.demand.get(p, 0) for p in periods)
        if everyone:  # an idle gateway's part is none, and its share the least one
            part = mine / max(everyone, mine)
        else:
            weight = bucket.rate or 1.0
            part = weight / (weight + self.book.weight_of_others(self, bucket.key))
        return max(1, math.ceil(bucket.limit.requests_per_unit * part))

    async def _reserve(self, bucket: Bucket, wanted: int, now: float, required: bool = False) -> int:
        """Up to `wanted` of the window's requests, as the counter store has them left (all of them when
        `required`: already let through)."""
        assert bucket.limit is not None
        start = _window_start(bucket.limit, now)
        hit = Hit(("quota", *bucket.key), start, start + bucket.limit.seconds, wanted)
        (total,) = await self.book.counters.increment([hit], int(now))
        return wanted if required else max(0, wanted - max(0, total - bucket.limit.requests_per_unit))

    def _assign(self, bucket: Bucket, tokens: int, now: float) -> list[_Action]:
        assert bucket.limit is not None
        ttl = math.ceil(bucket.window_start + bucket.limit.seconds - now) + TTL_GRACE
        if tokens <= 0:
            return [_blanket(bucket, _STRATEGY.DENY_ALL, ttl)]
        tokens_now = token_bucket_pb2.TokenBucket(
            max_tokens=tokens,
            tokens_per_fill=wrappers_pb2.UInt32Value(value=1),
            fill_interval=duration_pb2.Duration(seconds=NO_REFILL),
        )
        filled = _Action(bucket_id=bucket.bucket_id)
        filled.quota_assignment_action.assignment_time_to_live.seconds = ttl
        filled.quota_assignment_action.rate_limit_strategy.token_bucket.CopyFrom(tokens_now)
        return [_blanket(bucket, _STRATEGY.DENY_ALL, ttl), filled]


def _demand_period(limit: Limit) -> int:
    return max(DEMAND_PERIODS[0], min(limit.seconds, DEMAND_PERIODS[1]))


def _demand_hit(bucket: Bucket, length: int, period: int, addend: int) -> Hit:
    return Hit(("demand", str(length), *bucket.key), period, period + 2 * length, addend)


def _window_start(limit: Limit, now: float) -> int:
    return int(now) - int(now) % limit.seconds


def _blanket(bucket: Bucket, rule: int, ttl: int) -> _Action:
    action = _Action(bucket_id=bucket.bucket_id)
    action.quota_assignment_action.assignment_time_to_live.seconds = max(ttl, 1)
    action.quota_assignment_action.rate_limit_strategy.blanket_rule = rule  # type: ignore[assignment]
    return action


def responses(actions: Iterable[_Action]) -> list[rlqs_pb2.RateLimitQuotaResponse]:
    """One response per action, in order: Envoy applies a bucket's DENY_ALL before the grant that follows it."""
    return [rlqs_pb2.RateLimitQuotaResponse(bucket_action=[action]) for action in actions]
