"""`envoy.service.ratelimit.v3.RateLimitService`: the compiled limits and a counter store, on gRPC."""

from __future__ import annotations

import time
from collections.abc import Callable

from envoy.service.ratelimit.v3 import rls_pb2
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from meshplane.callout_server import Unary
from meshplane.observability.metrics import RATELIMIT_DECISIONS, RATELIMIT_SHADOWED
from meshplane.ratelimiter.counters import Counters, CountersUnavailable
from meshplane.ratelimiter.decision import answer, applicable_limits, hits_for
from meshplane.ratelimiter.table import LimitTable

_CODE_NAMES = {code: rls_pb2.RateLimitResponse.Code.Name(code) for code in rls_pb2.RateLimitResponse.Code.values()}
_SHOULD_RATE_LIMIT = rls_pb2.DESCRIPTOR.services_by_name["RateLimitService"].methods_by_name["ShouldRateLimit"]
UNCONFIGURED = "unconfigured"
"""The `domain` label of requests for a domain no limit names: callers choose those, so they are not labels."""


class RateLimitService:
    """Answers ShouldRateLimit from the table's current limits. A counter store that cannot count
    fails the call with UNAVAILABLE, so Envoy applies its own failure mode (by default: let through)."""

    def __init__(self, table: LimitTable, counters: Counters, clock: Callable[[], float] = time.time) -> None:
        self._table = table
        self._counters = counters
        self._clock = clock

    def methods(self) -> list[Unary]:
        return [Unary(_SHOULD_RATE_LIMIT, self.should_rate_limit)]

    async def should_rate_limit(self, request: rls_pb2.RateLimitRequest) -> rls_pb2.RateLimitResponse:
        domain = self._table.domains.get(request.domain)
        if domain is None:
            RATELIMIT_DECISIONS.labels(UNCONFIGURED, "OK").inc()
            return rls_pb2.RateLimitResponse(overall_code=rls_pb2.RateLimitResponse.OK)
        now = int(self._clock())
        limits = applicable_limits(domain, request)
        try:
            totals = await self._counters.increment(hits_for(request, limits, now), now)
        except CountersUnavailable as exc:
            RATELIMIT_DECISIONS.labels(request.domain, "UNAVAILABLE").inc()
            raise GRPCError(Status.UNAVAILABLE, str(exc)) from exc
        response, shadowed = answer(limits, totals, now)
        RATELIMIT_DECISIONS.labels(request.domain, _CODE_NAMES[response.overall_code]).inc()
        if shadowed:
            RATELIMIT_SHADOWED.inc(shadowed)
        return response
