"""The Envoy match and rewrite forms of path patterns (see `model.paths`).

Literal patterns use Envoy's plain path matchers; only templated ones need a regex, which keeps RE2
programs small and matching cheap.
"""

from __future__ import annotations

from envoy.config.route.v3 import route_components_pb2
from envoy.type.matcher.v3 import regex_pb2

from meshplane.model.paths import PathPattern


def route_match(pattern: PathPattern) -> route_components_pb2.RouteMatch:
    """The cheapest Envoy matcher for a pattern; all of them ignore the query string."""
    if not pattern.literal:
        return route_components_pb2.RouteMatch(safe_regex=regex_pb2.RegexMatcher(regex=pattern.regex()))
    if not pattern.rest:
        return route_components_pb2.RouteMatch(path=pattern.path())
    if not pattern.segments:
        return route_components_pb2.RouteMatch(prefix="/")
    return route_components_pb2.RouteMatch(path_separated_prefix=pattern.path())


def grpc_route_match(pattern: PathPattern) -> route_components_pb2.RouteMatch:
    """The matcher for gRPC's xDS client, which refuses `path_separated_prefix` and ignores a prefix with more
    than two slashes. Its request paths are always `/service/method`, so a literal rest becomes a prefix
    ending in `/` for one segment and a regex below that; other patterns match as they do in Envoy."""
    if pattern.literal and pattern.rest and len(pattern.segments) == 1:
        return route_components_pb2.RouteMatch(prefix=pattern.path() + "/")
    if pattern.literal and pattern.rest and pattern.segments:
        return route_components_pb2.RouteMatch(safe_regex=regex_pb2.RegexMatcher(regex=pattern.regex()))
    return route_match(pattern)


def base_rewrite(base: PathPattern, backend_base_path: str) -> regex_pb2.RegexMatchAndSubstitute | None:
    """Replace the API's basePath by the backend's: `/orders/items` → `/items` or `/v2/items`, `/orders` → `/v2`.

    Works on the path without its query string (Envoy keeps the query as it was); None when nothing changes.
    """
    target = backend_base_path.rstrip("/")
    if base.literal and base.path().rstrip("/") == target:
        return None
    prefix = base.regex_prefix()
    if not target:
        pattern, substitution = f"^{prefix}/?(.*)$", "/\\1"
    elif prefix:
        pattern, substitution = f"^{prefix}(.*)$", target + "\\1"
    else:
        pattern, substitution = "^/$|^(/.+)$", target + "\\1"
    return regex_pb2.RegexMatchAndSubstitute(pattern=regex_pb2.RegexMatcher(regex=pattern), substitution=substitution)
