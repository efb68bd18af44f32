"""Request shaping (see `model.shaping`) as fields of an API's Envoy routes, plus the clusters mirrors go to."""

from __future__ import annotations

from dataclasses import dataclass, field

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import base_pb2
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.config.route.v3 import route_components_pb2
from envoy.type.matcher.v3 import regex_pb2
from envoy.type.v3 import percent_pb2
from google.protobuf.internal.containers import RepeatedCompositeFieldContainer, RepeatedScalarFieldContainer

from meshplane.agent.translate.apis import Api, upstream_digest
from meshplane.agent.translate.clusters import backend_resources
from meshplane.agent.translate.paths import base_rewrite
from meshplane.model.kinds import Backend, BackendProtocol, Operation
from meshplane.model.paths import PathPattern, base_pattern, catch_all, operation_pattern
from meshplane.model.shaping import (
    MirrorBackend,
    PathModifier,
    PathModifierType,
    RequestRedirect,
    ResponseHeaderModifier,
    Shaping,
)

_Option = base_pb2.HeaderValueOption
_REDIRECT_CODES = {
    301: route_components_pb2.RedirectAction.MOVED_PERMANENTLY,
    302: route_components_pb2.RedirectAction.FOUND,
    303: route_components_pb2.RedirectAction.SEE_OTHER,
    307: route_components_pb2.RedirectAction.TEMPORARY_REDIRECT,
    308: route_components_pb2.RedirectAction.PERMANENT_REDIRECT,
}


def route_shaping(api: Api, op: Operation | None) -> Shaping | None:
    """What shapes the route of `op` (None: the API's catch-all): the operation's parts over the API's."""
    own = op.shaping if op is not None else None
    return own.over(api.spec.shaping) if own is not None else api.spec.shaping


@dataclass
class ShapingPlan:
    """The mirror clusters (and their endpoints) the routes' shaping needs, gathered as routes are shaped."""

    clusters: dict[str, cluster_pb2.Cluster] = field(default_factory=dict)
    endpoints: dict[str, endpoint_pb2.ClusterLoadAssignment] = field(default_factory=dict)

    def decorate(self, api: Api, op: Operation | None, route: route_components_pb2.Route) -> None:
        """Shape one of the API's forwarding routes; a route that already answers by itself (503) is left."""
        shaping = route_shaping(api, op)
        if shaping is None or not route.HasField("route"):
            return
        pattern = _route_pattern(api, op)
        if shaping.response_header_modifier is not None:
            _modify(shaping.response_header_modifier, route.response_headers_to_add, route.response_headers_to_remove)
        if shaping.direct_response is not None:
            answer = shaping.direct_response
            route.ClearField("route")
            route.direct_response.status = answer.status_code
            if answer.body:
                route.direct_response.body.inline_string = answer.body
            if answer.content_type is not None:
                route.response_headers_to_add.append(_option("content-type", answer.content_type, overwrite=True))
            return
        if shaping.request_redirect is not None:
            route.ClearField("route")
            route.redirect.CopyFrom(_redirect(shaping.request_redirect, pattern))
            return
        if shaping.request_header_modifier is not None:
            _modify(shaping.request_header_modifier, route.request_headers_to_add, route.request_headers_to_remove)
        action = route.route
        if shaping.url_rewrite is not None:
            if shaping.url_rewrite.hostname is not None:
                action.host_rewrite_literal = shaping.url_rewrite.hostname
            if shaping.url_rewrite.path is not None:
                action.ClearField("regex_rewrite")
                rewrite = _path_rewrite(shaping.url_rewrite.path, pattern)
                if rewrite is not None:
                    action.regex_rewrite.CopyFrom(rewrite)
        if shaping.request_mirror is not None:
            mirror = shaping.request_mirror
            name = self._mirror_cluster(api, mirror.backend)
            share = percent_pb2.FractionalPercent(
                numerator=mirror.percent, denominator=percent_pb2.FractionalPercent.HUNDRED
            )
            action.request_mirror_policies.append(
                route_components_pb2.RouteAction.RequestMirrorPolicy(
                    cluster=name, runtime_fraction=base_pb2.RuntimeFractionalPercent(default_value=share)
                )
            )

    def _mirror_cluster(self, api: Api, mirror: MirrorBackend) -> str:
        """`mirror.<project>.<name>.<upstream digest>`: one cluster per mirror an API names, however many routes."""
        backend = Backend(host=mirror.host, port=mirror.port, protocol=BackendProtocol(mirror.protocol))
        name = f"mirror.{api.project}.{api.name}.{upstream_digest(backend)}"
        if name not in self.clusters:
            cluster, assignment = backend_resources(backend, name)
            self.clusters[name] = cluster
            if assignment is not None:
                self.endpoints[name] = assignment
        return name


def _route_pattern(api: Api, op: Operation | None) -> PathPattern:
    base = base_pattern(api.spec.base_path)
    return operation_pattern(base, op.path) if op is not None else catch_all(base)


def _modify(
    modifier: ResponseHeaderModifier,
    to_add: RepeatedCompositeFieldContainer[_Option],
    to_remove: RepeatedScalarFieldContainer[str],
) -> None:
    to_add.extend(_option(h.name, h.value, overwrite=True) for h in modifier.set)
    to_add.extend(_option(h.name, h.value, overwrite=False) for h in modifier.add)
    to_remove.extend(modifier.remove)


def _option(name: str, value: str, *, overwrite: bool) -> _Option:
    """A literal header value: Envoy reads `%...%` in header values as a command, so `%` is doubled."""
    action = _Option.OVERWRITE_IF_EXISTS_OR_ADD if overwrite else _Option.APPEND_IF_EXISTS_OR_ADD
    return _Option(header=base_pb2.HeaderValue(key=name, value=value.replace("%", "%%")), append_action=action)


def _path_rewrite(modifier: PathModifier, pattern: PathPattern) -> regex_pb2.RegexMatchAndSubstitute | None:
    """The path change as one regex substitution on the path without its query; None when nothing changes."""
    if modifier.type is PathModifierType.REPLACE_FULL_PATH:
        assert modifier.replace_full_path is not None
        return _substitute("^.*$", modifier.replace_full_path)
    if modifier.type is PathModifierType.REPLACE_PREFIX_MATCH:
        assert modifier.replace_prefix_match is not None
        return base_rewrite(pattern, modifier.replace_prefix_match)
    assert modifier.replace_regex_match is not None
    return _substitute(modifier.replace_regex_match.pattern, modifier.replace_regex_match.substitution)


def _substitute(pattern: str, substitution: str) -> regex_pb2.RegexMatchAndSubstitute:
    return regex_pb2.RegexMatchAndSubstitute(pattern=regex_pb2.RegexMatcher(regex=pattern), substitution=substitution)


def _redirect(redirect: RequestRedirect, pattern: PathPattern) -> route_components_pb2.RedirectAction:
    action = route_components_pb2.RedirectAction(response_code=_REDIRECT_CODES[redirect.status_code])
    if redirect.scheme is not None:
        action.scheme_redirect = redirect.scheme.value
    if redirect.hostname is not None:
        action.host_redirect = redirect.hostname
    if redirect.port is not None:
        action.port_redirect = redirect.port
    if redirect.path is not None and redirect.path.type is PathModifierType.REPLACE_FULL_PATH:
        action.path_redirect = redirect.path.replace_full_path or ""
    elif redirect.path is not None:
        rewrite = _path_rewrite(redirect.path, pattern)
        if rewrite is not None:
            action.regex_rewrite.CopyFrom(rewrite)
    return action
