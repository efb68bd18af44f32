"""Path patterns as users write them (`/orders`, `/items/{id}/*`) and their Envoy match and rewrite forms.

A pattern is a list of segments, each literal text or a one-segment parameter, optionally followed by a
"rest" that matches the path itself or anything below it (a final `*` in an operation, or an API's
catch-all). Literal patterns use Envoy's plain path matchers; only templated ones need a regex, which
keeps RE2 programs small and matching cheap.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from envoy.config.route.v3 import route_components_pb2
from envoy.type.matcher.v3 import regex_pb2

_PARAM = re.compile(r"^\{[A-Za-z_][A-Za-z0-9_]*\}$")
_LITERAL, _ONE_SEGMENT, _REST = 0, 1, 2
"""Ranks for ordering: a literal segment is more specific than a parameter, a parameter than a rest."""


@dataclass(frozen=True)
class PathPattern:
    segments: tuple[str | None, ...]
    """Literal text, or None for a parameter that matches one non-empty segment."""
    rest: bool = False

    @property
    def literal(self) -> bool:
        return all(segment is not None for segment in self.segments)

    def path(self) -> str:
        """The path a literal pattern matches (without its rest)."""
        return "/" + "/".join(segment or "" for segment in self.segments)

    def regex_prefix(self) -> str:
        """RE2 for the segments alone: empty for the root, so it can be followed by more."""
        return "".join("/" + (re.escape(s) if s is not None else "[^/]+") for s in self.segments)

    def regex(self) -> str:
        if self.rest:
            return self.regex_prefix() + "(?:/.*)?"
        return self.regex_prefix() or "/"

    def specificity(self) -> tuple[int, ...]:
        """Sorts more specific patterns first (a subset of another's paths never comes after it)."""
        ranks = tuple(_LITERAL if s is not None else _ONE_SEGMENT for s in self.segments)
        return (*ranks, _REST) if self.rest else ranks


def base_pattern(base_path: str) -> PathPattern:
    """An API's basePath; a `{param}` or `*` segment in it stands for exactly one segment."""
    return PathPattern(tuple(None if _templated(s) else s for s in _split(base_path)))


def operation_pattern(base: PathPattern, path: str) -> PathPattern:
    """basePath + operation path: `/` is the basePath itself, a final `*` is the rest."""
    segments = _split(path)
    rest = bool(segments) and segments[-1] == "*"
    if rest:
        segments = segments[:-1]
    return PathPattern(base.segments + tuple(None if _PARAM.match(s) else s for s in segments), rest)


def catch_all(base: PathPattern) -> PathPattern:
    return PathPattern(base.segments, rest=True)


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


def _split(path: str) -> tuple[str, ...]:
    return () if path == "/" else tuple(path[1:].split("/"))


def _templated(segment: str) -> bool:
    return segment == "*" or bool(_PARAM.match(segment))
