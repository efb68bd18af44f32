"""The decision without I/O: the limit each request descriptor falls under, the counters that hits,
and the answer once their totals are known. Same semantics as envoyproxy/ratelimit."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from envoy.service.ratelimit.v3 import rls_pb2

from meshplane.ratelimiter.counters import Hit
from meshplane.ratelimiter.limits import DomainLimits, Limit

UNLIMITED_REMAINING = 2**32 - 1
"""`limit_remaining` reported for an unlimited descriptor (the field's largest value)."""

_OK = rls_pb2.RateLimitResponse.OK
_OVER_LIMIT = rls_pb2.RateLimitResponse.OVER_LIMIT


class Answer(NamedTuple):
    response: rls_pb2.RateLimitResponse
    shadowed: int
    """Descriptors over their limit that were let through because the limit is in shadow mode."""


def applicable_limits(domain: DomainLimits, request: rls_pb2.RateLimitRequest) -> list[Limit | None]:
    """Per request descriptor, the limit it falls under; one that another matched limit replaces is none."""
    limits = [domain.find(descriptor.entries) for descriptor in request.descriptors]
    replaced = {name for limit in limits if limit is not None for name in limit.replaces}
    if replaced:
        limits = [None if limit is not None and limit.name in replaced else limit for limit in limits]
    return limits


def hits_for(request: rls_pb2.RateLimitRequest, limits: Sequence[Limit | None], now: int) -> list[Hit]:
    """The counters to add to, one per counted descriptor: keyed by the domain and the request's entries,
    in the window of `now` (Unix seconds). A hits_addend of 0 counts as 1."""
    default = request.hits_addend or 1
    hits = []
    for descriptor, limit in zip(request.descriptors, limits, strict=True):
        if limit is None or limit.unlimited:
            continue
        start = now - now % limit.seconds
        key = (request.domain, *(part for entry in descriptor.entries for part in (entry.key, entry.value)))
        addend = descriptor.hits_addend.value if descriptor.HasField("hits_addend") else 0
        hits.append(Hit(key, start, start + limit.seconds, addend or default, limit.requests_per_unit))
    return hits


def answer(limits: Sequence[Limit | None], totals: Sequence[int], now: int) -> Answer:
    """One status per descriptor, as Envoy turns them into `x-ratelimit-*` headers; `totals` are the
    counters after this request, in the order of `hits_for`."""
    response = rls_pb2.RateLimitResponse(overall_code=_OK)
    shadowed = 0
    counted = iter(totals)
    for limit in limits:
        status = response.statuses.add(code=_OK)
        if limit is None:
            continue
        if limit.unlimited:
            status.limit_remaining = UNLIMITED_REMAINING
            continue
        total = next(counted)
        status.current_limit.CopyFrom(limit.current)
        status.duration_until_reset.seconds = limit.seconds - now % limit.seconds
        if total <= limit.requests_per_unit:
            status.limit_remaining = limit.requests_per_unit - total
        elif limit.shadow:
            shadowed += 1
        else:
            status.code = response.overall_code = _OVER_LIMIT
    return Answer(response, shadowed)
