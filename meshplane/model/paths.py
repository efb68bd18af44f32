"""Path patterns as users write them (`/orders`, `/items/{id}/*`), parsed into segments.

A pattern is a list of segments, each literal text or a one-segment parameter, optionally followed by a
"rest" that matches the path itself or anything below it (a final `*` in an operation, or an API's
catch-all). The translator turns patterns into Envoy matchers; write-time checks compare them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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


def _split(path: str) -> tuple[str, ...]:
    return () if path == "/" else tuple(path[1:].split("/"))


def _templated(segment: str) -> bool:
    return segment == "*" or bool(_PARAM.match(segment))
