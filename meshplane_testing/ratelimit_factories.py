"""Builders for rate-limit configs and requests, and a service on memory counters with a hand-set clock."""

from __future__ import annotations

from collections.abc import Sequence

from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.discovery.v3 import discovery_pb2
from envoy.service.ratelimit.v3 import rls_pb2

from meshplane.dataplane import RATELIMIT_CONFIG_TYPE
from meshplane.proto.v1 import rls_conf_pb2
from meshplane.ratelimiter.counters import Counters
from meshplane.ratelimiter.memory import MemoryCounters
from meshplane.ratelimiter.service import RateLimitService
from meshplane.ratelimiter.table import LimitTable
from meshplane.xds.client import DeltaUpdate
from meshplane.xds.resource import pack

Response = rls_pb2.RateLimitResponse
OK, OVER_LIMIT = Response.OK, Response.OVER_LIMIT
Pairs = Sequence[tuple[str, str]]


def policy(requests_per_unit: int = 0, unit: int = rls_conf_pb2.MINUTE, **fields) -> rls_conf_pb2.RateLimitPolicy:
    return rls_conf_pb2.RateLimitPolicy(requests_per_unit=requests_per_unit, unit=unit, **fields)


def node(
    key: str,
    value: str = "",
    rate_limit: rls_conf_pb2.RateLimitPolicy | None = None,
    *children: rls_conf_pb2.RateLimitDescriptor,
    **fields,
) -> rls_conf_pb2.RateLimitDescriptor:
    return rls_conf_pb2.RateLimitDescriptor(key=key, value=value, rate_limit=rate_limit, descriptors=children, **fields)


def config(domain: str, *descriptors: rls_conf_pb2.RateLimitDescriptor) -> rls_conf_pb2.RateLimitConfig:
    return rls_conf_pb2.RateLimitConfig(name=domain, domain=domain, descriptors=descriptors)


def descriptor(pairs: Pairs, hits_addend: int | None = None) -> ratelimit_pb2.RateLimitDescriptor:
    built = ratelimit_pb2.RateLimitDescriptor(
        entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key=k, value=v) for k, v in pairs]
    )
    if hits_addend is not None:
        built.hits_addend.value = hits_addend
    return built


def request(
    domain: str, *descriptors: Pairs | ratelimit_pb2.RateLimitDescriptor, hits_addend: int = 0
) -> rls_pb2.RateLimitRequest:
    built = [d if isinstance(d, ratelimit_pb2.RateLimitDescriptor) else descriptor(d) for d in descriptors]
    return rls_pb2.RateLimitRequest(domain=domain, descriptors=built, hits_addend=hits_addend)


def update(*configs: rls_conf_pb2.RateLimitConfig, removed: Sequence[str] = ()) -> DeltaUpdate:
    """A delta update carrying `configs`, each as a resource named after its config's name."""
    resources = []
    for item in configs:
        packed = pack(item.name, item)
        resources.append(discovery_pb2.Resource(name=packed.name, version=packed.version, resource=packed.body))
    return DeltaUpdate(RATELIMIT_CONFIG_TYPE, resources, list(removed), "nonce")


class Limiter:
    """The service over a LimitTable, with counters in memory (unless given) and a clock the test sets."""

    def __init__(self, counters: Counters | None = None) -> None:
        self.now = 1_700_000_000.0
        self.table = LimitTable()
        self.counters = counters or MemoryCounters()
        self.service = RateLimitService(self.table, self.counters, clock=lambda: self.now)

    async def load(self, *configs: rls_conf_pb2.RateLimitConfig) -> Limiter:
        await self.table.apply(update(*configs))
        return self

    async def ask(self, req: rls_pb2.RateLimitRequest) -> rls_pb2.RateLimitResponse:
        return await self.service.should_rate_limit(req)
