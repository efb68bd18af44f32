"""A small interpreter of the route tables the translator emits, the way Envoy evaluates them.

It knows only what the translator uses: domains (exact, `*.suffix`, `*`), the prefix, path,
path_separated_prefix and safe_regex matchers, an exact `:method` header matcher, and regex_rewrite.
"""

from __future__ import annotations

import re

from envoy.config.route.v3 import route_components_pb2, route_pb2
from hypothesis import strategies as st

from meshplane.model.resource import Resource
from meshplane_testing.translate_factories import LITERALS, METHODS


def virtual_host(config: route_pb2.RouteConfiguration, host: str) -> route_components_pb2.VirtualHost | None:
    """Exact domain first, then the longest matching `*.suffix`, then `*` (the port is ignored)."""
    host = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    by_domain = {domain: vhost for vhost in config.virtual_hosts for domain in vhost.domains}
    if host in by_domain:
        return by_domain[host]
    suffixes = [d for d in by_domain if d.startswith("*.") and host.endswith(d[1:]) and len(host) > len(d) - 1]
    if suffixes:
        return by_domain[max(suffixes, key=len)]
    return by_domain.get("*")


def select(
    config: route_pb2.RouteConfiguration, host: str, method: str, path: str
) -> route_components_pb2.Route | None:
    """The first route matching the request, or None (Envoy's 404)."""
    vhost = virtual_host(config, host)
    if vhost is None:
        return None
    return next((route for route in vhost.routes if matches(route.match, method, path)), None)


def matches(match: route_components_pb2.RouteMatch, method: str, path: str) -> bool:
    path = path.split("?", 1)[0]
    kind = match.WhichOneof("path_specifier")
    if kind == "prefix":
        path_ok = path.startswith(match.prefix)
    elif kind == "path":
        path_ok = path == match.path
    elif kind == "path_separated_prefix":
        value = match.path_separated_prefix
        path_ok = path == value or path.startswith(value + "/")
    elif kind == "safe_regex":
        path_ok = re.fullmatch(match.safe_regex.regex, path) is not None
    else:
        raise AssertionError(f"unexpected path matcher {kind}")
    return path_ok and all(_header_ok(header, method) for header in match.headers)


def _header_ok(header: route_components_pb2.HeaderMatcher, method: str) -> bool:
    assert header.name == ":method" and header.string_match.WhichOneof("match_pattern") == "exact"
    return header.string_match.exact == method


def forwarded_path(route: route_components_pb2.Route, path: str) -> str:
    """The path (with query) the upstream receives: regex_rewrite applies to the path, the query stays."""
    path, sep, query = path.partition("?")
    rewrite = route.route.regex_rewrite
    if rewrite.HasField("pattern"):
        path = re.sub(rewrite.pattern.regex, rewrite.substitution, path)
    return path + sep + query


def segments(path: str) -> list[str]:
    return [] if path == "/" else path[1:].split("/")


def pattern_matches(pattern: list[str], path: list[str]) -> bool:
    rest = bool(pattern) and pattern[-1] == "*"
    fixed = pattern[:-1] if rest else pattern
    if len(path) < len(fixed) or (not rest and len(path) != len(fixed)):
        return False
    return all(p == s if not p.startswith("{") else s != "" for p, s in zip(fixed, path, strict=False))


def host_matches(pattern: str, host: str) -> bool:
    return pattern in ("*", host) or (pattern.startswith("*.") and host.endswith(pattern[1:]))


def declared(apis: list[Resource], host: str, method: str, path: str) -> set[tuple[str, str]]:
    """Route names ("project/name METHOD path" or "project/name *") of every operation that covers the request."""
    return {
        (f"{a.metadata.project}/{a.metadata.name}", name)
        for a in apis
        if any(host_matches(h, host) for h in a.spec.hostnames)
        for name in covering(a, method, path)
    }


def covering(a: Resource, method: str, path: str) -> set[str]:
    """Route names of the API's operations (or its catch-all) that cover a request, its hostnames aside."""
    ident = f"{a.metadata.project}/{a.metadata.name}"
    base = segments(a.spec.base_path)
    names = set()
    if not a.spec.operations and pattern_matches([*base, "*"], segments(path)):
        names.add(f"{ident} *")
    for op in a.spec.operations:
        if op.method.value == method and pattern_matches(base + segments(op.path), segments(path)):
            names.add(f"{ident} {op.method.value} {op.path}")
    return names


@st.composite
def probes(draw: st.DrawFn, apis: list[Resource]) -> list[tuple[str, str, str]]:
    """Requests near the declared operations: concrete instances of them, and mutations and random paths."""
    values = st.sampled_from([*LITERALS, "zz"])
    paths = []
    for a in apis:
        base = segments(a.spec.base_path)
        for op in a.spec.operations or []:
            concrete = []
            for segment in base + segments(op.path):
                if segment == "*":
                    concrete += draw(st.lists(st.one_of(values, st.just("")), max_size=2))
                else:
                    concrete.append(draw(values) if segment.startswith("{") else segment)
            paths += [concrete, [*concrete, draw(values)]]
        paths += [base + draw(st.lists(values, max_size=3))]
    paths += [[*p[:-1], p[-1] + "x"] for p in list(paths) if p]
    paths += draw(st.lists(st.lists(values, max_size=4), max_size=5))
    hosts = st.sampled_from(["a.com", "b.a.com", "x.a.com", "c.org", "other.net"])
    return [(draw(hosts), draw(st.sampled_from(METHODS)), "/" + "/".join(p)) for p in paths]
