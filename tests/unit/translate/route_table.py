"""A small interpreter of the route tables the translator emits, the way Envoy evaluates them.

It knows only what the translator uses: domains (exact, `*.suffix`, `*`), the prefix, path,
path_separated_prefix and safe_regex matchers, an exact `:method` header matcher, and regex_rewrite.
"""

from __future__ import annotations

import re

from envoy.config.route.v3 import route_components_pb2, route_pb2


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
