"""Hostnames as the Gateway API reads them: a `*.` prefix stands for one or more labels, and a route serves
on a listener only the hostnames both of them match."""

from __future__ import annotations

from collections.abc import Sequence

ANY = "*"


def matches(pattern: str, host: str) -> bool:
    """Whether `pattern` (a hostname, `*.suffix`, or `*`) matches every host `host` matches."""
    if pattern in (ANY, host):
        return True
    if not pattern.startswith("*."):
        return False
    suffix = pattern[1:]
    return host.endswith(suffix) and len(host) > len(suffix)


def intersection(listener: str | None, route: Sequence[str]) -> list[str]:
    """The hostnames a route serves on a listener, sorted; none when they share no host (`*` when neither
    names one)."""
    if listener is None:
        return sorted(set(route)) or [ANY]
    if not route:
        return [listener]
    shared = set()
    for hostname in route:
        if matches(listener, hostname):
            shared.add(hostname)
        elif matches(hostname, listener):
            shared.add(listener)
    return sorted(shared)


def specificity(hostname: str) -> tuple[int, int]:
    """Sorts the most specific first: exact names, then longer wildcards, then `*`."""
    if hostname == ANY:
        return (2, 0)
    if hostname.startswith("*."):
        return (1, -len(hostname))
    return (0, -len(hostname))
