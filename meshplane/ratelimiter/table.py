"""The limits in force: the agent's last accepted RateLimitConfigs, compiled per domain."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from google.protobuf.message import DecodeError

from meshplane.dataplane import RATELIMIT_CONFIG_TYPE
from meshplane.observability.logging import get_logger
from meshplane.observability.metrics import RATELIMIT_CONFIG_UPDATES
from meshplane.proto.v1 import rls_conf_pb2
from meshplane.ratelimiter.limits import DomainLimits, InvalidLimits, compile_domains
from meshplane.xds.client import DeltaUpdate, UpdateRejected

log = get_logger("meshplane.ratelimiter")


class LimitTable:
    """Applies delta updates all or nothing: a bad resource rejects the whole update (a NACK), and
    the previous configuration stays in force; so does the last one while the agent is away."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[str, rls_conf_pb2.RateLimitConfig]] = {}
        self.domains: Mapping[str, DomainLimits] = MappingProxyType({})

    def versions(self, type_url: str) -> dict[str, str]:
        """Name -> version of what is held, so a reconnect is sent only the difference."""
        if type_url != RATELIMIT_CONFIG_TYPE:
            return {}
        return {name: version for name, (version, _) in self._held.items()}

    async def apply(self, update: DeltaUpdate) -> None:
        """Take `update` (DeltaClient's `on_update`), or raise UpdateRejected and keep what was held."""
        try:
            held = self._updated(update)
            domains = compile_domains({name: config for name, (_, config) in held.items()})
        except (UpdateRejected, InvalidLimits) as exc:
            RATELIMIT_CONFIG_UPDATES.labels("rejected").inc()
            raise UpdateRejected(str(exc)) from None
        self._held, self.domains = held, MappingProxyType(domains)
        RATELIMIT_CONFIG_UPDATES.labels("applied").inc()
        log.info(
            "rate-limit configuration applied",
            upserts=len(update.upserts),
            removed=len(update.removed),
            domains={domain: limits.descriptors for domain, limits in sorted(domains.items())},
        )

    def _updated(self, update: DeltaUpdate) -> dict[str, tuple[str, rls_conf_pb2.RateLimitConfig]]:
        if update.type_url != RATELIMIT_CONFIG_TYPE:
            raise UpdateRejected(f"not subscribed to {update.type_url}")
        held = dict(self._held)
        for resource in update.upserts:
            if resource.resource.type_url != RATELIMIT_CONFIG_TYPE:
                raise UpdateRejected(f"{resource.name}: a {resource.resource.type_url}, not a RateLimitConfig")
            try:
                config = rls_conf_pb2.RateLimitConfig.FromString(resource.resource.value)
            except DecodeError as exc:
                raise UpdateRejected(f"{resource.name}: undecodable RateLimitConfig ({exc})") from None
            held[resource.name] = (resource.version, config)
        for name in update.removed:
            held.pop(name, None)
        return held
