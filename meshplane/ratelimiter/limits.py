"""Limits as the hot path reads them: one descriptor tree per domain, compiled once per update.

Matching follows envoyproxy/ratelimit: at each level an entry takes the child with its key and
value, else one whose value is a prefix ending in `*`, else the child with its key and no value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from envoy.service.ratelimit.v3 import rls_pb2

from meshplane.proto.v1 import rls_conf_pb2

UNIT_SECONDS: Mapping[int, int] = {
    rls_conf_pb2.SECOND: 1,
    rls_conf_pb2.MINUTE: 60,
    rls_conf_pb2.HOUR: 3_600,
    rls_conf_pb2.DAY: 86_400,
    # Fixed lengths, as envoyproxy/ratelimit counts them: no calendar arithmetic on the hot path.
    rls_conf_pb2.WEEK: 7 * 86_400,
    rls_conf_pb2.MONTH: 30 * 86_400,
    rls_conf_pb2.YEAR: 365 * 86_400,
}
"""Window length of each unit; windows are aligned to the Unix epoch (UTC)."""


class InvalidLimits(ValueError):
    """A configuration that cannot be enforced; the message names the resource and the field."""


class Entry(Protocol):
    """One (key, value) of a request descriptor."""

    @property
    def key(self) -> str: ...

    @property
    def value(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Limit:
    """What one config node allows. `current` is the limit as responses report it (None when unlimited)."""

    requests_per_unit: int
    seconds: int
    current: rls_pb2.RateLimitResponse.RateLimit | None = field(default=None, compare=False)
    unlimited: bool = False
    shadow: bool = False
    name: str = ""
    replaces: frozenset[str] = frozenset()


@dataclass(slots=True, eq=False)
class DescriptorNode:
    """One config node: its limit, and its children by exact value, by value prefix, and by key alone."""

    limit: Limit | None = None
    exact: dict[tuple[str, str], DescriptorNode] = field(default_factory=dict)
    prefixed: list[tuple[str, str, DescriptorNode]] = field(default_factory=list)
    any_value: dict[str, DescriptorNode] = field(default_factory=dict)

    def child(self, key: str, value: str) -> DescriptorNode | None:
        found = self.exact.get((key, value))
        if found is not None:
            return found
        for prefix_key, prefix, node in self.prefixed:
            if prefix_key == key and value.startswith(prefix):
                return node
        return self.any_value.get(key)


@dataclass(frozen=True, slots=True)
class DomainLimits:
    """The compiled tree of one domain; `descriptors` counts its config nodes (for logs)."""

    root: DescriptorNode
    descriptors: int

    def find(self, entries: Iterable[Entry]) -> Limit | None:
        """The limit of the node the entries lead to, if every entry finds a node and that one has a limit."""
        node = self.root
        for entry in entries:
            found = node.child(entry.key, entry.value)
            if found is None:
                return None
            node = found
        return node.limit


def compile_domains(configs: Mapping[str, rls_conf_pb2.RateLimitConfig]) -> dict[str, DomainLimits]:
    """Each resource's tree by its domain (resources keyed by name); InvalidLimits names the first bad field."""
    domains: dict[str, DomainLimits] = {}
    owners: dict[str, str] = {}
    for name in sorted(configs):
        config = configs[name]
        if not config.domain:
            raise InvalidLimits(f"{name}: domain is required")
        if (owner := owners.get(config.domain)) is not None:
            raise InvalidLimits(f"{name}: domain {config.domain!r} is already configured by {owner}")
        owners[config.domain] = name
        root, count = _node(config.descriptors, f"{name}: descriptors", None)
        domains[config.domain] = DomainLimits(root, count)
    return domains


def _node(
    descriptors: Sequence[rls_conf_pb2.RateLimitDescriptor], path: str, limit: Limit | None
) -> tuple[DescriptorNode, int]:
    """A node with `limit` over the compiled `descriptors`, and how many config nodes lie below it."""
    node = DescriptorNode(limit)
    count = 0
    seen: set[tuple[str, str]] = set()
    for index, descriptor in enumerate(descriptors):
        at = f"{path}[{index}]"
        key, value = descriptor.key, descriptor.value
        if not key:
            raise InvalidLimits(f"{at}.key: required")
        if (key, value) in seen:
            raise InvalidLimits(f"{at}: another descriptor at this level has key {key!r} and value {value!r}")
        seen.add((key, value))
        if descriptor.quota_mode:
            raise InvalidLimits(f"{at}.quota_mode: not supported")
        own = _limit(descriptor, f"{at}.rate_limit") if descriptor.HasField("rate_limit") else None
        child, below = _node(descriptor.descriptors, f"{at}.descriptors", own)
        count += 1 + below
        if not value:
            node.any_value[key] = child
        elif value.endswith("*"):
            node.prefixed.append((key, value[:-1], child))
        else:
            node.exact[key, value] = child
    return node, count


def _limit(descriptor: rls_conf_pb2.RateLimitDescriptor, at: str) -> Limit:
    policy = descriptor.rate_limit
    for index, replaced in enumerate(policy.replaces):
        if not replaced.name:
            raise InvalidLimits(f"{at}.replaces[{index}].name: required")
    shadow, name = descriptor.shadow_mode, policy.name
    replaces = frozenset(replaced.name for replaced in policy.replaces)
    if policy.unlimited:
        if policy.unit != rls_conf_pb2.UNKNOWN:
            raise InvalidLimits(f"{at}.unit: an unlimited limit takes no unit")
        return Limit(0, 0, unlimited=True, shadow=shadow, name=name, replaces=replaces)
    seconds = UNIT_SECONDS.get(policy.unit)
    if seconds is None:
        units = ", ".join(rls_conf_pb2.RateLimitUnit.Name(unit) for unit in UNIT_SECONDS)
        raise InvalidLimits(f"{at}.unit: {_unit_name(policy.unit)} is not a unit; use one of {units}")
    if policy.requests_per_unit == 0:
        raise InvalidLimits(f"{at}.requests_per_unit: must be at least 1 (or set unlimited)")
    current = rls_pb2.RateLimitResponse.RateLimit(
        name=policy.name,
        requests_per_unit=policy.requests_per_unit,
        unit=rls_pb2.RateLimitResponse.RateLimit.Unit.Value(rls_conf_pb2.RateLimitUnit.Name(policy.unit)),
    )
    return Limit(policy.requests_per_unit, seconds, current, shadow=shadow, name=name, replaces=replaces)


def _unit_name(unit: int) -> str:
    try:
        return rls_conf_pb2.RateLimitUnit.Name(unit)
    except ValueError:
        return str(unit)
