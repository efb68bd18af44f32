"""API resources for translator tests: a builder for hand-written cases and hypothesis strategies."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from meshplane.agent.translate.targets import BackendPolicy
from meshplane.model.kinds import HttpMethod
from meshplane.model.registry import REGISTRY
from meshplane.model.resource import Resource

API = REGISTRY.get("API").model

LITERALS = ["items", "v1", "a.b", "x-y", "a+b", "(c)", "d$", "~e", "f&g", "h=i", "@j", "k:l", "m%20n"]
"""Literal path segments, including every regex metacharacter a path segment may hold."""
HOSTNAMES = ["*", "a.com", "*.a.com", "b.a.com", "c.org"]
METHODS = [method.value for method in HttpMethod]
LOOPBACK = BackendPolicy(allow_loopback=True)
"""What these tests' gateways allow: their backends listen on loopback, as a local setup's do."""


def api(name: str, project: str = "shop", **spec: Any) -> Resource:
    """A validated API resource; spec keys in wire (camelCase) form."""
    return REGISTRY.parse({"kind": "API", "metadata": {"name": name, "project": project}, "spec": spec})


def backend(host: str = "127.0.0.1", port: int = 9001, **fields: Any) -> dict[str, Any]:
    return {"host": host, "port": port, **fields}


def example_api() -> Resource:
    """The DESIGN example: two operations on /orders/items, one backend that serves them at /items."""
    return api(
        "orders",
        basePath="/orders",
        operations=[{"method": "GET", "path": "/items"}, {"method": "POST", "path": "/items"}],
        backends=[backend(basePath="/", timeout="15s")],
    )


segments = st.sampled_from(LITERALS)
base_paths = st.one_of(st.just("/"), st.lists(segments, min_size=1, max_size=2).map(lambda s: "/" + "/".join(s)))


@st.composite
def operation_paths(draw: st.DrawFn) -> str:
    parts = draw(st.lists(st.one_of(segments, st.sampled_from(["{id}", "{name}"])), max_size=3))
    if draw(st.booleans()):
        parts.append("*")
    elif parts and draw(st.integers(0, 4)) == 0:
        parts.append("")
    return "/" + "/".join(parts)


operations = st.lists(
    st.fixed_dictionaries({"method": st.sampled_from(METHODS), "path": operation_paths()}),
    max_size=5,
    unique_by=lambda op: (op["method"], op["path"]),
)

backends = st.lists(
    st.fixed_dictionaries(
        {
            "host": st.sampled_from(["127.0.0.1", "10.0.0.7", "::1", "backend.internal", "localhost"]),
            "port": st.integers(1, 65535),
            "protocol": st.sampled_from(["http", "http2", "grpc"]),
            "weight": st.integers(0, 100),
        },
        optional={"timeout": st.sampled_from(["250ms", "15s", "1m30s"])},
    ),
    min_size=1,
    max_size=3,
).filter(lambda items: any(item["weight"] > 0 for item in items))


_header_lists = st.lists(
    st.fixed_dictionaries(
        {"name": st.sampled_from(["x-a", "x-b", "user-agent"]), "value": st.sampled_from(["1", "100%", "a b"])}
    ),
    max_size=2,
    unique_by=lambda header: header["name"],
)
_path_modifiers = st.one_of(
    base_paths.map(lambda path: {"type": "ReplaceFullPath", "replaceFullPath": path}),
    base_paths.map(lambda path: {"type": "ReplacePrefixMatch", "replacePrefixMatch": path}),
    st.just(
        {
            "type": "ReplaceRegexMatch",
            "replaceRegexMatch": {"pattern": "^/(\\w+)(/.*)?$", "substitution": "/x/\\1"},
        }
    ),
)
_forwarding = st.fixed_dictionaries(
    {},
    optional={
        "requestHeaderModifier": st.fixed_dictionaries({"set": _header_lists}),
        "responseHeaderModifier": st.fixed_dictionaries({"add": _header_lists}),
        "urlRewrite": st.fixed_dictionaries({}, optional={"hostname": st.just("up.internal"), "path": _path_modifiers}),
        "requestMirror": st.fixed_dictionaries(
            {
                "backend": st.fixed_dictionaries(
                    {"host": st.sampled_from(["10.0.0.9", "mirror.internal"]), "port": st.integers(1, 65535)}
                ),
                "percent": st.integers(0, 100),
            }
        ),
    },
)
_answering = st.one_of(
    st.fixed_dictionaries(
        {
            "requestRedirect": st.fixed_dictionaries(
                {"statusCode": st.sampled_from([301, 302, 303, 307, 308])},
                optional={
                    "scheme": st.sampled_from(["http", "https"]),
                    "hostname": st.just("moved.example"),
                    "port": st.integers(1, 65535),
                    "path": _path_modifiers,
                },
            )
        }
    ),
    st.fixed_dictionaries(
        {
            "directResponse": st.fixed_dictionaries(
                {"statusCode": st.integers(200, 599)},
                optional={"body": st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF), max_size=20)},
            )
        }
    ),
)
shapings = st.one_of(_forwarding, _answering)
"""Valid `shaping` parts (see model.shaping): what goes upstream changed, or an answer at the gateway."""


@st.composite
def shaped_api_sets(draw: st.DrawFn, *, max_size: int = 4) -> list[Resource]:
    """APIs as `api_sets` draws them, each shaped, on the API or on its operations."""
    shaped = []
    for resource in draw(api_sets(max_size=max_size)):
        spec = resource.spec.to_wire()
        if spec["operations"] and draw(st.booleans()):
            spec["operations"] = [{**op, "shaping": draw(shapings)} for op in spec["operations"]]
        else:
            spec["shaping"] = draw(shapings)
        shaped.append(api(resource.metadata.name, resource.metadata.project or "", **spec))
    return shaped


@st.composite
def api_specs(draw: st.DrawFn, *, with_operations: bool | None = None) -> dict[str, Any]:
    ops = draw(operations)
    if with_operations is True and not ops:
        ops = [{"method": "GET", "path": draw(operation_paths())}]
    if with_operations is False:
        ops = []
    backend_base = draw(base_paths)  # every backend of an API shares one basePath (the model requires it)
    return {
        "basePath": draw(base_paths),
        "hostnames": draw(st.lists(st.sampled_from(HOSTNAMES), min_size=1, max_size=2, unique=True)),
        "operations": ops,
        "backends": [{**item, "basePath": backend_base} for item in draw(backends)],
    }


@st.composite
def api_sets(draw: st.DrawFn, *, max_size: int = 5, with_operations: bool | None = None) -> list[Resource]:
    """APIs with distinct (project, name), including the same name in two projects."""
    keys = draw(
        st.lists(st.tuples(st.sampled_from(["p1", "p2"]), st.sampled_from("abcd")), max_size=max_size, unique=True)
    )
    return [api(name, project, **draw(api_specs(with_operations=with_operations))) for project, name in keys]
