"""A route's matches as Envoy route matches, each with its precedence (the HTTPRouteRule and GRPCRouteRule
orders): sorting the keys puts the match the specification prefers first, and Envoy takes the first that
matches.

HTTP: an exact path, then the longest prefix (regular expressions, which the specification leaves unranked,
between the two), then a method, then the most header matches, then the most query parameter matches.
gRPC: the longest service, then the longest method, then the most header matches. The route's age,
namespace/name and the rule and match order break what remains (see `rules`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from envoy.config.route.v3 import route_components_pb2 as route_pb2
from envoy.type.matcher.v3 import regex_pb2, string_pb2

from meshplane.gatewayapi.objects import Unsupported, items, mapping

Precedence = tuple[int, ...]
DEFAULT_HTTP_MATCH: Mapping[str, Any] = {"path": {"type": "PathPrefix", "value": "/"}}
_PATH_RANK = {"Exact": 0, "RegularExpression": 1, "PathPrefix": 2}


_NOT_RE2 = re.compile(r"\(\?<?[=!]|\(\?>|\\[1-9]")
"""Lookarounds, atomic groups and back-references: Python takes them, RE2 (Envoy's engine) does not."""


def regex(pattern: str) -> regex_pb2.RegexMatcher:
    """An RE2 matcher; Unsupported for a pattern Envoy would refuse, so one route cannot fail them all."""
    try:
        re.compile(pattern)
    except re.error as problem:
        raise Unsupported(f"regular expression {pattern!r}: {problem}") from problem
    if _NOT_RE2.search(pattern):
        raise Unsupported(f"regular expression {pattern!r} uses what RE2 does not support")
    return regex_pb2.RegexMatcher(regex=pattern)


def _string(kind: str, value: str) -> string_pb2.StringMatcher:
    if kind == "RegularExpression":
        return string_pb2.StringMatcher(safe_regex=regex(value))
    return string_pb2.StringMatcher(exact=value)


def _headers(match: Mapping[str, Any]) -> list[route_pb2.HeaderMatcher]:
    """Header matches; a header named twice matches as its first entry says, as the specification asks."""
    seen: dict[str, route_pb2.HeaderMatcher] = {}
    for entry in items(match.get("headers")):
        name = str(entry.get("name") or "").lower()
        if name and name not in seen:
            kind = str(entry.get("type") or "Exact")
            seen[name] = route_pb2.HeaderMatcher(name=name, string_match=_string(kind, str(entry.get("value", ""))))
    return list(seen.values())


def path_prefix(match: Mapping[str, Any]) -> str | None:
    """The prefix of a PathPrefix match without its trailing slash ('' for `/`); None for other matches."""
    if "path" not in match:
        return ""
    path = mapping(match.get("path"))
    if (path.get("type") or "PathPrefix") != "PathPrefix":
        return None
    return str(path.get("value") or "/").rstrip("/")


def http_match(match: Mapping[str, Any]) -> tuple[route_pb2.RouteMatch, Precedence]:
    path = mapping(match.get("path"))
    kind = str(path.get("type") or "PathPrefix")
    value = str(path.get("value") or "/")
    envoy = route_pb2.RouteMatch()
    if kind == "Exact":
        envoy.path = value
    elif kind == "RegularExpression":
        envoy.safe_regex.CopyFrom(regex(value))
    elif value.rstrip("/"):
        # Segment-wise: /foo matches /foo and /foo/bar, never /foobar.
        envoy.path_separated_prefix = value.rstrip("/")
    else:
        envoy.prefix = "/"
    headers = _headers(match)
    header_count = len(headers)
    method = match.get("method")
    if method:
        headers.append(route_pb2.HeaderMatcher(name=":method", string_match=string_pb2.StringMatcher(exact=method)))
    envoy.headers.extend(headers)
    queries: dict[str, route_pb2.QueryParameterMatcher] = {}
    for entry in items(match.get("queryParams")):
        name = str(entry.get("name") or "")
        if name and name not in queries:
            kind_of = str(entry.get("type") or "Exact")
            queries[name] = route_pb2.QueryParameterMatcher(
                name=name, string_match=_string(kind_of, str(entry.get("value", "")))
            )
    envoy.query_parameters.extend(queries.values())
    precedence = (
        _PATH_RANK.get(kind, 2),
        -len(value.rstrip("/") if kind == "PathPrefix" else value),
        0 if method else 1,
        -header_count,
        -len(queries),
    )
    return envoy, precedence


def grpc_match(match: Mapping[str, Any]) -> tuple[route_pb2.RouteMatch, Precedence]:
    """A GRPCRoute match on the request path `/service/method`; no method match: every gRPC request."""
    method = mapping(match.get("method"))
    kind = str(method.get("type") or "Exact")
    service, name = str(method.get("service") or ""), str(method.get("method") or "")
    envoy = route_pb2.RouteMatch()
    if kind == "RegularExpression":
        pattern = f"/{service or '[^/]+'}/{name or '[^/]+'}"
        envoy.safe_regex.CopyFrom(regex(pattern))
    elif service and name:
        envoy.path = f"/{service}/{name}"
    elif service:
        envoy.prefix = f"/{service}/"
    elif name:
        envoy.safe_regex.CopyFrom(regex_pb2.RegexMatcher(regex=f"/[^/]+/{re.escape(name)}"))
    else:
        envoy.prefix = "/"
    headers = _headers(match)
    envoy.headers.extend(headers)
    envoy.grpc.SetInParent()
    rank = 0 if kind == "Exact" else 1
    return envoy, (rank, -len(service), -len(name), -len(headers))
