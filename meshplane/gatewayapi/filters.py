"""A rule's filters on its Envoy route: header modifiers, redirect, URL rewrite, mirror and CORS."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from envoy.config.core.v3 import base_pb2
from envoy.config.route.v3 import route_components_pb2 as route_pb2
from envoy.extensions.filters.http.cors.v3 import cors_pb2
from envoy.type.matcher.v3 import regex_pb2, string_pb2
from envoy.type.v3 import percent_pb2
from google.protobuf import wrappers_pb2

from meshplane.agent.translate.access import CORS
from meshplane.agent.translate.common import packed
from meshplane.gatewayapi.objects import Listener, items, mapping, number, strings

ADD = base_pb2.HeaderValueOption.APPEND_IF_EXISTS_OR_ADD
SET = base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD
REDIRECT_CODES = {
    301: route_pb2.RedirectAction.MOVED_PERMANENTLY,
    302: route_pb2.RedirectAction.FOUND,
    303: route_pb2.RedirectAction.SEE_OTHER,
    307: route_pb2.RedirectAction.TEMPORARY_REDIRECT,
    308: route_pb2.RedirectAction.PERMANENT_REDIRECT,
}
WELL_KNOWN_PORTS = {"http": 80, "https": 443}
MirrorTarget = Callable[[Mapping[str, Any]], str | None]
"""The cluster a mirror's backendRef sends to (None: it cannot be resolved)."""


def of_type(filters: list[Mapping[str, Any]], kind: str) -> Mapping[str, Any] | None:
    """The first filter of a type, with its settings (`requestRedirect` for RequestRedirect, ...)."""
    field = {"URLRewrite": "urlRewrite", "CORS": "cors"}.get(kind, kind[0].lower() + kind[1:])
    for entry in filters:
        if entry.get("type") == kind:
            return mapping(entry.get(field))
    return None


def header_options(modifier: Mapping[str, Any]) -> tuple[list[base_pb2.HeaderValueOption], list[str]]:
    """A header modifier's `set` and `add` as Envoy header options, and its `remove`."""
    options = [
        base_pb2.HeaderValueOption(
            header=base_pb2.HeaderValue(key=str(entry.get("name")).lower(), value=str(entry.get("value", ""))),
            append_action=action,
        )
        for key, action in (("set", SET), ("add", ADD))
        for entry in items(modifier.get(key))
    ]
    return options, [name.lower() for name in strings(modifier.get("remove"))]


def apply_header_modifiers(
    route: route_pb2.Route | route_pb2.WeightedCluster.ClusterWeight, filters: list[Mapping[str, Any]]
) -> None:
    """On a route, or on one backend's share of it."""
    request = of_type(filters, "RequestHeaderModifier")
    if request is not None:
        added, removed = header_options(request)
        route.request_headers_to_add.extend(added)
        route.request_headers_to_remove.extend(removed)
    response = of_type(filters, "ResponseHeaderModifier")
    if response is not None:
        added, removed = header_options(response)
        route.response_headers_to_add.extend(added)
        route.response_headers_to_remove.extend(removed)


def prefix_substitution(prefix: str, replacement: str) -> regex_pb2.RegexMatchAndSubstitute:
    """Replace the matched prefix segment-wise (`/foo/bar` with /foo → /x is `/x/bar`; with /foo → / it is
    `/bar`); the query string stays as it was."""
    kept = replacement.rstrip("/")
    if not kept:
        pattern, substitution = f"^{re.escape(prefix)}/*", "/"
    elif prefix:
        pattern, substitution = f"^{re.escape(prefix)}", kept
    else:
        pattern, substitution = "^/", kept + "/"
    return regex_pb2.RegexMatchAndSubstitute(pattern=regex_pb2.RegexMatcher(regex=pattern), substitution=substitution)


def full_path_substitution(path: str) -> regex_pb2.RegexMatchAndSubstitute:
    return regex_pb2.RegexMatchAndSubstitute(pattern=regex_pb2.RegexMatcher(regex="^/.*$"), substitution=path)


def _path_modifier(path: Mapping[str, Any], prefix: str | None) -> tuple[str, Any] | None:
    """('full', path) or ('prefix', substitution) for a path modifier; None when there is none."""
    kind = path.get("type")
    if kind == "ReplaceFullPath":
        return "full", str(path.get("replaceFullPath") or "/")
    if kind == "ReplacePrefixMatch":
        return "prefix", prefix_substitution(prefix or "", str(path.get("replacePrefixMatch") or "/"))
    return None


def redirect(settings: Mapping[str, Any], prefix: str | None, listener: Listener | None) -> route_pb2.RedirectAction:
    """RequestRedirect. Without a port, a new scheme takes its well-known port and otherwise the listener's
    port is kept; Location names no port that is its scheme's well-known one (the connection manager drops
    the port from Host before routing, so Envoy adds none of its own)."""
    action = route_pb2.RedirectAction(response_code=REDIRECT_CODES.get(number(settings.get("statusCode")) or 302))
    scheme = str(settings.get("scheme") or "")
    if scheme:
        action.scheme_redirect = scheme
    if settings.get("hostname"):
        action.host_redirect = str(settings["hostname"])
    served_scheme = scheme or ("https" if listener is not None and listener.protocol == "HTTPS" else "http")
    port = number(settings.get("port")) or (None if scheme or listener is None else listener.port)
    if port and port != WELL_KNOWN_PORTS.get(served_scheme):
        action.port_redirect = port
    modifier = _path_modifier(mapping(settings.get("path")), prefix)
    if modifier is not None and modifier[0] == "full":
        action.path_redirect = modifier[1]
    elif modifier is not None:
        action.regex_rewrite.CopyFrom(modifier[1])
    return action


def apply_rewrite(action: route_pb2.RouteAction, settings: Mapping[str, Any], prefix: str | None) -> None:
    """URLRewrite: the Host and the path the backend sees."""
    if settings.get("hostname"):
        action.host_rewrite_literal = str(settings["hostname"])
    modifier = _path_modifier(mapping(settings.get("path")), prefix)
    if modifier is not None and modifier[0] == "full":
        action.regex_rewrite.CopyFrom(full_path_substitution(modifier[1]))
    elif modifier is not None:
        action.regex_rewrite.CopyFrom(modifier[1])


def apply_mirrors(action: route_pb2.RouteAction, filters: list[Mapping[str, Any]], target: MirrorTarget) -> bool:
    """Each RequestMirror's copy of the request (the answer ignored); False if a mirror cannot be resolved."""
    resolved = True
    for entry in filters:
        if entry.get("type") != "RequestMirror":
            continue
        mirror = mapping(entry.get("requestMirror"))
        cluster = target(mapping(mirror.get("backendRef")))
        if cluster is None:
            resolved = False
            continue
        policy = route_pb2.RouteAction.RequestMirrorPolicy(cluster=cluster)
        _mirror_share(policy, mirror)
        action.request_mirror_policies.append(policy)
    return resolved


def _mirror_share(policy: route_pb2.RouteAction.RequestMirrorPolicy, mirror: Mapping[str, Any]) -> None:
    """`percent`, or `fraction` (numerator / denominator, 100 by default) in millionths; neither: every request."""
    percent, fraction = number(mirror.get("percent")), mirror.get("fraction")
    if percent is not None:
        share = percent / 100
    elif isinstance(fraction, Mapping):
        share = (number(fraction.get("numerator")) or 0) / (number(fraction.get("denominator")) or 100)
    else:
        return
    policy.runtime_fraction.default_value.numerator = int(min(max(share, 0.0), 1.0) * 1_000_000)
    policy.runtime_fraction.default_value.denominator = percent_pb2.FractionalPercent.MILLION


def apply_cors(route: route_pb2.Route, filters: list[Mapping[str, Any]]) -> None:
    """A CORS filter's policy on the route: the gateway answers preflights and decorates answers."""
    settings = of_type(filters, "CORS")
    if settings is None:
        return
    policy = cors_pb2.CorsPolicy(
        allow_origin_string_match=[_origin(origin) for origin in strings(settings.get("allowOrigins"))],
        allow_methods=",".join(strings(settings.get("allowMethods"))),
        allow_headers=",".join(strings(settings.get("allowHeaders"))),
        expose_headers=",".join(strings(settings.get("exposeHeaders"))),
        allow_credentials=wrappers_pb2.BoolValue(value=bool(settings.get("allowCredentials"))),
        forward_not_matching_preflights=wrappers_pb2.BoolValue(value=False),
    )
    if settings.get("maxAge") is not None:
        policy.max_age = str(number(settings.get("maxAge")))
    route.typed_per_filter_config[CORS].CopyFrom(packed(policy))


def _origin(origin: str) -> string_pb2.StringMatcher:
    """`*` is any origin; a `*` in the host stands for one or more labels; anything else is exact."""
    if origin == "*":
        return string_pb2.StringMatcher(safe_regex=regex_pb2.RegexMatcher(regex=".*"))
    if "*" not in origin:
        return string_pb2.StringMatcher(exact=origin)
    pattern = "^" + re.escape(origin).replace(r"\*", r"[^/]+") + "$"
    return string_pb2.StringMatcher(safe_regex=regex_pb2.RegexMatcher(regex=pattern))
