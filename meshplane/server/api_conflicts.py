"""Whether two APIs would answer the same request at one gateway.

A gateway picks the first matching route, so when two APIs share a host and a request matches a
route of each, one of them silently loses it. Such a pair is refused at write time (409) rather than
settled by route order: every declared operation stays reachable through its own API.
"""

from __future__ import annotations

from collections.abc import Iterable

from meshplane.model.kinds import APISpec
from meshplane.model.paths import PathPattern, base_pattern, catch_all, operation_pattern

ANY_METHOD = "*"


def templated(segment: str) -> bool:
    """A path segment that matches any value: `*` or a `{parameter}`."""
    return segment == "*" or (segment.startswith("{") and segment.endswith("}"))


def route_bucket(base_path: str) -> str | None:
    """The first segment of a basePath, None when it is templated: two APIs whose first segments are
    different literals never meet, so a write need only look at its own bucket and None's."""
    first = base_path.split("/")[1]
    return None if templated(first) else first


def hosts_overlap(a: str, b: str) -> bool:
    """Some host name matches both patterns (`*`, `*.suffix` or an exact name)."""
    if a == "*" or b == "*" or a == b:
        return True
    if a.startswith("*.") and b.startswith("*."):
        return a.endswith(b[1:]) or b.endswith(a[1:])
    if a.startswith("*."):
        return b.endswith(a[1:])
    if b.startswith("*."):
        return a.endswith(b[1:])
    return False


def patterns_overlap(a: PathPattern, b: PathPattern) -> bool:
    """Some path matches both: segment by segment a literal meets an equal literal or a parameter, and a
    longer pattern can only meet a shorter one through the shorter one's rest."""
    for left, right in zip(a.segments, b.segments, strict=False):
        if left is not None and right is not None and left != right:
            return False
    if len(a.segments) == len(b.segments):
        return True
    shorter = a if len(a.segments) < len(b.segments) else b
    return shorter.rest


def routes(spec: APISpec) -> list[tuple[str, PathPattern]]:
    """(method, pattern) of every route the API gets; the catch-all answers any method."""
    base = base_pattern(spec.base_path)
    if not spec.operations:
        return [(ANY_METHOD, catch_all(base))]
    return [(op.method.value, operation_pattern(base, op.path)) for op in spec.operations]


def clash(a: APISpec, b: APISpec, show_theirs: bool = True) -> str | None:
    """A sentence naming a request both APIs would match, or None when they never meet. Without
    `show_theirs` it names only `a`'s route: `b` may be another project's, whose routes are its own business."""
    if not any(hosts_overlap(x, y) for x in a.hostnames for y in b.hostnames):
        return None
    for method_a, pattern_a in routes(a):
        for method_b, pattern_b in routes(b):
            if ANY_METHOD not in (method_a, method_b) and method_a != method_b:
                continue
            if patterns_overlap(pattern_a, pattern_b):
                method = method_a if method_a != ANY_METHOD else method_b
                what = "any method" if method == ANY_METHOD else method
                theirs = f" and {_show(pattern_b)}" if show_theirs else ""
                return f"{what} on {_show(pattern_a)}{theirs}"
    return None


def _show(pattern: PathPattern) -> str:
    path = "/" + "/".join(segment if segment is not None else "{param}" for segment in pattern.segments)
    return (path.rstrip("/") + "/*") if pattern.rest else path


def share_a_route_table(project_a: str, a: APISpec, project_b: str, b: APISpec) -> bool:
    """Whether two APIs are served from one route table: the default listener's (neither names a Gateway) or
    a Gateway's listener's (both name that Gateway, of their one project). Others never meet."""
    if not a.gateways and not b.gateways:
        return True
    return project_a == project_b and not set(a.gateways).isdisjoint(b.gateways)


def first_clash(spec: APISpec, others: Iterable[tuple[str | None, APISpec]]) -> tuple[str | None, str] | None:
    """(other API's name, the clash) for the first stored API this one would shadow or be shadowed by. An
    API given without a name (another project's) stays unnamed, and so do its routes."""
    for name, other in others:
        if (found := clash(spec, other, show_theirs=name is not None)) is not None:
            return name, found
    return None
