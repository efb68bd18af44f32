"""Virtual-host grouping: which APIs answer for which domains.

Envoy refuses a route table in which two virtual hosts share a domain, and sends each request to the one
virtual host with the most specific matching domain (exact, then longest `*.suffix`, then `*`). So every
hostname any API names becomes a domain exactly once, and its virtual host carries the routes of every API
whose hostnames cover it; domains served by the same APIs share a virtual host. A request thereby reaches
exactly the APIs whose hostnames match its host.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

Key = tuple[str, str]
"""An API's (project, name)."""


def _covering_patterns(domain: str) -> set[str]:
    """Every hostname pattern that matches all the hosts `domain` matches: itself, `*` and its `*.suffix`es."""
    labels = domain.split(".")
    return {"*", domain} | {"*." + ".".join(labels[i:]) for i in range(1, len(labels))}


def group_domains(hostnames: Mapping[Key, Iterable[str]]) -> list[tuple[list[str], list[Key]]]:
    """(sorted domains, sorted API keys) per virtual host, in order of each group's first domain."""
    apis_by_pattern: dict[str, set[Key]] = defaultdict(set)
    for key, hosts in hostnames.items():
        for host in hosts:
            apis_by_pattern[host].add(key)
    domains_by_apis: dict[tuple[Key, ...], list[str]] = defaultdict(list)
    for domain in sorted(apis_by_pattern):
        patterns = _covering_patterns(domain) & apis_by_pattern.keys()
        keys = sorted(set().union(*(apis_by_pattern[p] for p in patterns)))
        domains_by_apis[tuple(keys)].append(domain)
    return sorted(((domains, list(keys)) for keys, domains in domains_by_apis.items()), key=lambda g: g[0][0])
