"""The Gateway API's HTTPRoute and GRPCRoute (gateway.networking.k8s.io/v1, standard channel) as the control
plane keeps the routes its clusters report: the spec field for field, refused as the CRD refuses it (a field
the standard channel does not have, a value outside its enums or bounds), and a status that shows each parent's
conditions as the cluster wrote them. They are never delivered to a cluster: a route stays in the cluster that
made it (see `server.cluster_objects`)."""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import Field, model_validator
from pydantic.alias_generators import to_camel

from meshplane.model.base import WireModel

Name = Annotated[str, Field(min_length=1, max_length=253)]
SectionName = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]
Group = Annotated[
    str, Field(max_length=253, pattern=r"^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
]
Kind = Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$")]
Namespace = Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]
Port = Annotated[int, Field(ge=1, le=65535)]
Hostname = Annotated[
    str,
    Field(
        min_length=1,
        max_length=253,
        pattern=r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
    ),
]
PreciseHostname = Annotated[
    str,
    Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"),
]
HeaderName = Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[A-Za-z0-9!#$%&'*+\-.^_\x60|~]+$")]
Duration = Annotated[str, Field(pattern=r"^([0-9]{1,5}(h|m|s|ms)){1,4}$")]
"""The Gateway API's duration: up to four parts of up to five digits each (`1h30m`, `500ms`)."""
Weight = Annotated[int, Field(ge=0, le=1_000_000)]


class ParentReference(WireModel):
    """The Gateway (or a listener of it, by sectionName or port) a route asks to attach to."""

    group: Group | None = None
    kind: Kind | None = None
    namespace: Namespace | None = None
    name: Name
    section_name: SectionName | None = None
    port: Port | None = None


class BackendObjectReference(WireModel):
    group: Group | None = None
    kind: Kind | None = None
    name: Name
    namespace: Namespace | None = None
    port: Port | None = None


class LocalObjectReference(WireModel):
    group: Group
    kind: Kind
    name: Name


class HTTPHeader(WireModel):
    name: HeaderName
    value: Annotated[str, Field(min_length=1, max_length=4096)]


class HTTPHeaderFilter(WireModel):
    set: Annotated[list[HTTPHeader], Field(max_length=16)] | None = None
    add: Annotated[list[HTTPHeader], Field(max_length=16)] | None = None
    remove: Annotated[list[str], Field(max_length=16)] | None = None


class HTTPPathModifier(WireModel):
    type: Literal["ReplaceFullPath", "ReplacePrefixMatch"]
    replace_full_path: Annotated[str, Field(max_length=1024)] | None = None
    replace_prefix_match: Annotated[str, Field(max_length=1024)] | None = None

    @model_validator(mode="after")
    def _one_replacement(self) -> Self:
        wanted = "replace_full_path" if self.type == "ReplaceFullPath" else "replace_prefix_match"
        other = "replace_prefix_match" if wanted == "replace_full_path" else "replace_full_path"
        if getattr(self, wanted) is None:
            raise ValueError(f"{self.type} needs {to_camel(wanted)}")
        if getattr(self, other) is not None:
            raise ValueError(f"{to_camel(other)} must be unset when type is {self.type}")
        return self


class HTTPRequestRedirectFilter(WireModel):
    scheme: Literal["http", "https"] | None = None
    hostname: PreciseHostname | None = None
    path: HTTPPathModifier | None = None
    port: Port | None = None
    status_code: Literal[301, 302] | None = None


class HTTPURLRewriteFilter(WireModel):
    hostname: PreciseHostname | None = None
    path: HTTPPathModifier | None = None


class Fraction(WireModel):
    numerator: Annotated[int, Field(ge=0)]
    denominator: Annotated[int, Field(ge=1)] | None = None


class HTTPRequestMirrorFilter(WireModel):
    backend_ref: BackendObjectReference
    percent: Annotated[int, Field(ge=0, le=100)] | None = None
    fraction: Fraction | None = None

    @model_validator(mode="after")
    def _one_share(self) -> Self:
        if self.percent is not None and self.fraction is not None:
            raise ValueError("only one of percent or fraction may be set")
        return self


class HTTPCORSFilter(WireModel):
    allow_origins: Annotated[list[Annotated[str, Field(min_length=1, max_length=253)]], Field(max_length=64)] | None = (
        None
    )
    allow_credentials: bool | None = None
    allow_methods: Annotated[list[str], Field(max_length=9)] | None = None
    allow_headers: Annotated[list[HeaderName], Field(max_length=64)] | None = None
    expose_headers: Annotated[list[HeaderName], Field(max_length=64)] | None = None
    max_age: Annotated[int, Field(ge=1)] | None = None


_FILTER_FIELDS = {
    "RequestHeaderModifier": "request_header_modifier",
    "ResponseHeaderModifier": "response_header_modifier",
    "RequestMirror": "request_mirror",
    "RequestRedirect": "request_redirect",
    "URLRewrite": "url_rewrite",
    "CORS": "cors",
    "ExtensionRef": "extension_ref",
}
"""Each filter type and the field that must hold its configuration (and be the only one set)."""


class _Filter(WireModel):
    """A filter: its `type` names the one field that holds its configuration."""

    def _check_union(self) -> Self:
        wanted = _FILTER_FIELDS[self.type]  # type: ignore[attr-defined]
        if getattr(self, wanted) is None:
            raise ValueError(f"a {self.type} filter needs {to_camel(wanted)}")  # type: ignore[attr-defined]
        extra = [to_camel(field) for field in _FILTER_FIELDS.values() if field != wanted and getattr(self, field, None)]
        if extra:
            raise ValueError(f"{', '.join(extra)} must be unset for a {self.type} filter")  # type: ignore[attr-defined]
        return self


class HTTPRouteFilter(_Filter):
    type: Literal[
        "RequestHeaderModifier",
        "ResponseHeaderModifier",
        "RequestMirror",
        "RequestRedirect",
        "URLRewrite",
        "ExtensionRef",
        "CORS",
    ]
    request_header_modifier: HTTPHeaderFilter | None = None
    response_header_modifier: HTTPHeaderFilter | None = None
    request_mirror: HTTPRequestMirrorFilter | None = None
    request_redirect: HTTPRequestRedirectFilter | None = None
    url_rewrite: HTTPURLRewriteFilter | None = None
    cors: HTTPCORSFilter | None = None
    extension_ref: LocalObjectReference | None = None

    @model_validator(mode="after")
    def _one_configuration(self) -> Self:
        return self._check_union()


class GRPCRouteFilter(_Filter):
    type: Literal["ResponseHeaderModifier", "RequestHeaderModifier", "RequestMirror", "ExtensionRef"]
    request_header_modifier: HTTPHeaderFilter | None = None
    response_header_modifier: HTTPHeaderFilter | None = None
    request_mirror: HTTPRequestMirrorFilter | None = None
    extension_ref: LocalObjectReference | None = None

    @model_validator(mode="after")
    def _one_configuration(self) -> Self:
        return self._check_union()


class HTTPBackendRef(BackendObjectReference):
    weight: Weight | None = None
    filters: Annotated[list[HTTPRouteFilter], Field(max_length=16)] | None = None


class GRPCBackendRef(BackendObjectReference):
    weight: Weight | None = None
    filters: Annotated[list[GRPCRouteFilter], Field(max_length=16)] | None = None


class HTTPPathMatch(WireModel):
    type: Literal["Exact", "PathPrefix", "RegularExpression"] | None = None
    value: Annotated[str, Field(max_length=1024)] | None = None


class HTTPHeaderMatch(WireModel):
    type: Literal["Exact", "RegularExpression"] | None = None
    name: HeaderName
    value: Annotated[str, Field(min_length=1, max_length=4096)]


class HTTPQueryParamMatch(WireModel):
    type: Literal["Exact", "RegularExpression"] | None = None
    name: Annotated[str, Field(min_length=1, max_length=256)]
    value: Annotated[str, Field(min_length=1, max_length=1024)]


class HTTPRouteMatch(WireModel):
    path: HTTPPathMatch | None = None
    headers: Annotated[list[HTTPHeaderMatch], Field(max_length=16)] | None = None
    query_params: Annotated[list[HTTPQueryParamMatch], Field(max_length=16)] | None = None
    method: Literal["GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"] | None = None


class HTTPRouteTimeouts(WireModel):
    request: Duration | None = None
    backend_request: Duration | None = None


class HTTPRouteRule(WireModel):
    name: SectionName | None = None
    matches: Annotated[list[HTTPRouteMatch], Field(max_length=64)] | None = None
    filters: Annotated[list[HTTPRouteFilter], Field(max_length=16)] | None = None
    backend_refs: Annotated[list[HTTPBackendRef], Field(max_length=16)] | None = None
    timeouts: HTTPRouteTimeouts | None = None


class GRPCMethodMatch(WireModel):
    type: Literal["Exact", "RegularExpression"] | None = None
    service: Annotated[str, Field(max_length=1024)] | None = None
    method: Annotated[str, Field(max_length=1024)] | None = None

    @model_validator(mode="after")
    def _names_something(self) -> Self:
        if self.service is None and self.method is None:
            raise ValueError("one or both of service or method must be specified")
        return self


class GRPCHeaderMatch(WireModel):
    type: Literal["Exact", "RegularExpression"] | None = None
    name: HeaderName
    value: Annotated[str, Field(min_length=1, max_length=4096)]


class GRPCRouteMatch(WireModel):
    method: GRPCMethodMatch | None = None
    headers: Annotated[list[GRPCHeaderMatch], Field(max_length=16)] | None = None


class GRPCRouteRule(WireModel):
    name: SectionName | None = None
    matches: Annotated[list[GRPCRouteMatch], Field(max_length=64)] | None = None
    filters: Annotated[list[GRPCRouteFilter], Field(max_length=16)] | None = None
    backend_refs: Annotated[list[GRPCBackendRef], Field(max_length=16)] | None = None


class HTTPRouteSpec(WireModel):
    """An HTTPRoute's spec as the cluster holds it (the CRD's defaults filled in by its API server)."""

    parent_refs: Annotated[list[ParentReference], Field(max_length=32)] | None = None
    hostnames: Annotated[list[Hostname], Field(max_length=16)] | None = None
    rules: Annotated[list[HTTPRouteRule], Field(max_length=16)] | None = None


class GRPCRouteSpec(WireModel):
    """A GRPCRoute's spec as the cluster holds it."""

    parent_refs: Annotated[list[ParentReference], Field(max_length=32)] | None = None
    hostnames: Annotated[list[Hostname], Field(max_length=16)] | None = None
    rules: Annotated[list[GRPCRouteRule], Field(max_length=16)] | None = None


class Condition(WireModel):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str | None = None
    message: str | None = None
    observed_generation: int | None = None
    last_transition_time: str | None = None


class RouteParentStatus(WireModel):
    """What a controller of the cluster made of the route on one of its parents."""

    parent_ref: ParentReference
    controller_name: str
    conditions: list[Condition] = Field(default_factory=list)


class RouteStatus(WireModel):
    """The route's `status.parents` as its cluster has them (this control plane's controller's entries)."""

    model_config = WireModel.model_config | {"extra": "allow"}

    parents: list[RouteParentStatus] = Field(default_factory=list)
