"""Request shaping of an API or one of its operations, named after Gateway API's HTTPRoute filters.

Each part is optional. On an operation, a part replaces the API's part of the same name; the others
are the API's. A redirect or a direct response answers at the gateway, so nothing is sent upstream
and the parts that change what goes upstream (URL rewrite, request headers, mirror) cannot sit beside
one in the same `shaping`.
"""

from __future__ import annotations

import re
from enum import IntEnum, StrEnum
from typing import Annotated, Self

from pydantic import AfterValidator, Field, field_validator, model_validator

from meshplane.dataplane import IDENTITY_HEADERS
from meshplane.model.access import HeaderName, _check_header
from meshplane.model.base import WireModel

_UNSAFE_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_PATH = re.compile(r"^/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*$")
_NO_RE2 = re.compile(r"\(\?(?:[=!]|<[=!]|>|P=)|\\[1-9Z]|[*+?}][+]")
"""Lookaround, atomic groups, backreferences, possessive repeats and `\\Z`: Python has them, RE2 (Envoy's
regex engine) does not."""
_COUNTED = re.compile(r"\{(\d+)(?:,(\d*))?\}")
MAX_REPEATS = 1000
"""Counted repetitions multiply the size of an RE2 program; their product is held below what Envoy compiles."""
_SUBSTITUTION_ESCAPE = re.compile(r"\\(.?)")
CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})
"""Headers whose value is a secret; shaping may remove them but not write them."""
MAX_VALUE = 4096
MAX_REGEX = 1024


def _check_value(value: str) -> str:
    if _UNSAFE_VALUE.search(value):
        raise ValueError("a header value may not hold control characters (CR, LF, NUL...)")
    return value


def _check_request_header(value: str) -> str:
    lowered = value.lower()
    if lowered in IDENTITY_HEADERS:
        raise ValueError(f"{lowered!r} is the caller's identity as the gateway found it: only the gateway sets it")
    if lowered == "host":
        raise ValueError("'host' is not a header to modify: use urlRewrite.hostname")
    return _check_header(lowered)


def _check_not_a_credential(value: str) -> str:
    if value in CREDENTIAL_HEADERS:
        raise ValueError(
            f"{value!r} would carry a credential in the clear (anyone who reads the API sees shaping): "
            "give the backend its credentials instead"
        )
    return value


def _check_path(value: str) -> str:
    if not _PATH.match(value):
        raise ValueError(f"{value!r} is not a path (starts with '/', no query, no spaces)")
    return value


HeaderValue = Annotated[str, Field(max_length=MAX_VALUE), AfterValidator(_check_value)]
RequestHeaderName = Annotated[str, AfterValidator(_check_request_header)]
WrittenRequestHeaderName = Annotated[RequestHeaderName, AfterValidator(_check_not_a_credential)]
PathValue = Annotated[str, Field(max_length=MAX_VALUE), AfterValidator(_check_path)]
Hostname = Annotated[str, Field(pattern=r"^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\.)*[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")]


class ResponseHeader(WireModel):
    name: HeaderName
    value: HeaderValue


class RequestHeader(WireModel):
    name: WrittenRequestHeaderName
    value: HeaderValue


class ResponseHeaderModifier(WireModel):
    """`set` replaces a header (or adds it), `add` appends a value, `remove` drops it; values are literal."""

    set: list[ResponseHeader] = Field(default_factory=list, max_length=64)
    add: list[ResponseHeader] = Field(default_factory=list, max_length=64)
    remove: list[HeaderName] = Field(default_factory=list, max_length=64)

    @model_validator(mode="after")
    def _each_name_once(self) -> Self:
        names = [h.name for h in self.set] + [h.name for h in self.add] + list(self.remove)
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"{', '.join(twice)}: a header goes in one of set, add and remove, once")
        return self


class RequestHeaderModifier(ResponseHeaderModifier):
    """As for responses, except that the identity headers the gateway sets and `host` are not the caller's."""

    set: list[RequestHeader] = Field(default_factory=list, max_length=64)  # type: ignore[assignment]
    add: list[RequestHeader] = Field(default_factory=list, max_length=64)  # type: ignore[assignment]
    remove: list[RequestHeaderName] = Field(default_factory=list, max_length=64)  # type: ignore[assignment]


class RegexSubstitution(WireModel):
    """An RE2 `pattern` and what replaces its matches; `\\1`..`\\9` stand for its groups."""

    pattern: str = Field(min_length=1, max_length=MAX_REGEX)
    substitution: str = Field(max_length=MAX_VALUE)

    @field_validator("pattern")
    @classmethod
    def _re2(cls, pattern: str) -> str:
        if _NO_RE2.search(pattern):
            raise ValueError("lookaround, atomic groups, possessive repeats, backreferences and \\Z are not RE2")
        repeats = 1
        for low, high in _COUNTED.findall(pattern):
            repeats *= max(int(low), int(high or 0), 1)
        if repeats > MAX_REPEATS:
            raise ValueError(f"counted repetitions multiply to {repeats}: at most {MAX_REPEATS}")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return pattern

    @model_validator(mode="after")
    def _groups_exist(self) -> Self:
        groups = re.compile(self.pattern).groups
        for escaped in _SUBSTITUTION_ESCAPE.findall(self.substitution):
            if not escaped.isdigit() or int(escaped) > groups:
                raise ValueError(f"substitution: '\\{escaped}' is not one of the pattern's {groups} group(s)")
        return self


class PathModifierType(StrEnum):
    REPLACE_FULL_PATH = "ReplaceFullPath"
    REPLACE_PREFIX_MATCH = "ReplacePrefixMatch"
    REPLACE_REGEX_MATCH = "ReplaceRegexMatch"


class PathModifier(WireModel):
    """How the path changes; the query string is kept.

    ReplaceFullPath: the path becomes `replaceFullPath`. ReplacePrefixMatch: what the route matched (the
    basePath plus the operation's path up to a final `*`) becomes `replacePrefixMatch`, the rest follows.
    ReplaceRegexMatch: `replaceRegexMatch` applies to the path as the caller sent it."""

    type: PathModifierType
    replace_full_path: PathValue | None = None
    replace_prefix_match: PathValue | None = None
    replace_regex_match: RegexSubstitution | None = None

    @model_validator(mode="after")
    def _one_for_its_type(self) -> Self:
        given = {
            PathModifierType.REPLACE_FULL_PATH: self.replace_full_path,
            PathModifierType.REPLACE_PREFIX_MATCH: self.replace_prefix_match,
            PathModifierType.REPLACE_REGEX_MATCH: self.replace_regex_match,
        }
        if given[self.type] is None:
            raise ValueError(f"type {self.type.value} needs {_camel(self.type)}")
        others = [_camel(kind) for kind, value in given.items() if kind is not self.type and value is not None]
        if others:
            raise ValueError(f"type {self.type.value} takes no {', '.join(others)}")
        return self


def _camel(kind: PathModifierType) -> str:
    return kind.value[0].lower() + kind.value[1:]


class UrlRewrite(WireModel):
    hostname: Hostname | None = None
    """The Host the upstream sees."""
    path: PathModifier | None = None


class RedirectScheme(StrEnum):
    HTTP = "http"
    HTTPS = "https"


class RedirectCode(IntEnum):
    MOVED_PERMANENTLY = 301
    FOUND = 302
    SEE_OTHER = 303
    TEMPORARY_REDIRECT = 307
    PERMANENT_REDIRECT = 308


class RequestRedirect(WireModel):
    """Answer with a redirect to the request's URL with these parts changed."""

    scheme: RedirectScheme | None = None
    hostname: Hostname | None = None
    port: int | None = Field(default=None, ge=1, le=65535)
    path: PathModifier | None = None
    status_code: RedirectCode = RedirectCode.FOUND


class MirrorBackend(WireModel):
    host: str = Field(min_length=1, max_length=253)
    port: int = Field(ge=1, le=65535)
    protocol: str = Field(default="http", pattern="^(http|http2|grpc)$")


class RequestMirror(WireModel):
    """A copy of `percent` of the requests goes to `backend` too; its answers are dropped."""

    backend: MirrorBackend
    percent: int = Field(default=100, ge=0, le=100)


class DirectResponse(WireModel):
    """The gateway answers itself; the body is literal."""

    status_code: int = Field(ge=200, le=599)
    body: str = Field(default="", max_length=MAX_VALUE)
    content_type: HeaderValue | None = None


class Shaping(WireModel):
    request_header_modifier: RequestHeaderModifier | None = None
    response_header_modifier: ResponseHeaderModifier | None = None
    url_rewrite: UrlRewrite | None = None
    request_redirect: RequestRedirect | None = None
    request_mirror: RequestMirror | None = None
    direct_response: DirectResponse | None = None

    @model_validator(mode="after")
    def _one_answer(self) -> Self:
        answers = self._given(_ANSWERS)
        if len(answers) > 1:
            raise ValueError("requestRedirect and directResponse both answer the request: give one")
        upstream = self._given(_UPSTREAM_PARTS)
        if answers and upstream:
            raise ValueError(f"{answers[0]} answers at the gateway: {', '.join(upstream)} would have no effect")
        return self

    def _given(self, parts: dict[str, str]) -> list[str]:
        return [wire for name, wire in parts.items() if getattr(self, name) is not None]

    def over(self, base: Shaping | None) -> Shaping:
        """This shaping (an operation's) with the parts it leaves out taken from `base` (its API's); an
        operation that answers itself drops the API's upstream parts, one that sends upstream the API's answer."""
        if base is None:
            return self
        dropped = _UPSTREAM_PARTS if self._given(_ANSWERS) else _ANSWERS if self._given(_UPSTREAM_PARTS) else {}
        inherited = {
            name: getattr(base, name)
            for name in Shaping.model_fields
            if getattr(self, name) is None and name not in dropped
        }
        return self.model_copy(update=inherited)


_ANSWERS = {"request_redirect": "requestRedirect", "direct_response": "directResponse"}
_UPSTREAM_PARTS = {
    "url_rewrite": "urlRewrite",
    "request_header_modifier": "requestHeaderModifier",
    "request_mirror": "requestMirror",
}
