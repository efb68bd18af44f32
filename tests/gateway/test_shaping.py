"""Request shaping end to end: each feature declared at the server, pushed by an agent to a real Envoy, and
observed at the upstream that received the request or in the gateway's answer."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from meshplane.client import object_path
from meshplane.model.registry import REGISTRY
from meshplane_testing import documents
from meshplane_testing.envoy import run_envoy
from meshplane_testing.eventually import eventually
from meshplane_testing.gateway import Gateway
from meshplane_testing.meshplane import run_agent, run_server
from meshplane_testing.north import put
from meshplane_testing.upstream import run_upstream

pytestmark = [pytest.mark.envoy, pytest.mark.timeout(120)]

PREFIX = {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/v2/goods"}
REGEX = {
    "type": "ReplaceRegexMatch",
    "replaceRegexMatch": {"pattern": "^/regex/(\\w+)/(\\w+)$", "substitution": "/\\2/\\1"},
}


def shaped_apis(upstream: int, mirror: int) -> list[dict[str, Any]]:
    """One API per feature, all to `upstream`; the mirrored one also to `mirror`."""
    backends = [documents.backend(upstream)]
    headers = {
        "set": [{"name": "x-set", "value": "100%"}, {"name": "user-agent", "value": "gateway"}],
        "add": [{"name": "x-add", "value": "added"}],
        "remove": ["x-drop"],
    }
    shapings: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {
        "headers": ({"requestHeaderModifier": headers,
                     "responseHeaderModifier": {"set": [{"name": "x-r", "value": "1"}]}}, []),
        "prefix": ({"urlRewrite": {"path": PREFIX}}, [{"method": "GET", "path": "/items/*"}]),
        "full": ({"urlRewrite": {"hostname": "full.internal",
                                 "path": {"type": "ReplaceFullPath", "replaceFullPath": "/status"}}}, []),
        "regex": ({"urlRewrite": {"path": REGEX}}, []),
        "redirect": ({"requestRedirect": {"scheme": "https", "hostname": "new.example", "port": 8443,
                                          "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/moved"},
                                          "statusCode": 301}}, []),
        "mirror": ({"requestMirror": {"backend": documents.backend(mirror), "percent": 100}}, []),
        "direct": ({"directResponse": {"statusCode": 418, "body": "teapot\n", "contentType": "text/plain"}}, []),
        "mixed": ({"directResponse": {"statusCode": 503, "body": "closed\n"}},
                  [{"method": "GET", "path": "/open",
                    "shaping": {"requestHeaderModifier": {"set": [{"name": "x-op", "value": "open"}]}}},
                   {"method": "GET", "path": "/closed"}]),
    }  # fmt: skip
    return [
        documents.api(name, backends=backends, shaping=shaping, operations=operations)
        for name, (shaping, operations) in shapings.items()
    ]


@dataclass
class Fleet:
    gateway: Gateway
    north: httpx.Client
    upstream: list[dict[str, Any]]
    mirror: list[dict[str, Any]]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    tmp = tmp_path_factory.mktemp("shaping")
    with contextlib.ExitStack() as stack:
        port, upstream = stack.enter_context(run_upstream("main"))
        mirror_port, mirror = stack.enter_context(run_upstream("mirror"))
        server = stack.enter_context(run_server(tmp))
        north = stack.enter_context(server.http())
        agent = stack.enter_context(run_agent(tmp, "edge", server))
        envoy = stack.enter_context(run_envoy(tmp, "gw-edge", agent.xds_port))
        envoy.wait_listener(agent.gateway_port)
        for doc in shaped_apis(port, mirror_port):
            put(north, doc)
        gateway = Gateway(agent.gateway_port)
        stack.callback(gateway.close)
        for path in ("/headers", "/prefix/items/x", "/full", "/regex/a/b", "/redirect", "/mirror", "/direct"):
            gateway.wait_for(path, lambda r: r.status_code != 404, timeout=30)
        gateway.wait_for("/mixed/open", lambda r: r.status_code == 200)
        yield Fleet(gateway, north, upstream, mirror)


Check = Callable[[httpx.Response, dict[str, Any]], None]


def seen_headers(*expected: tuple[str, str | None]) -> Check:
    def check(response: httpx.Response, seen: dict[str, Any]) -> None:
        for name, value in expected:
            assert seen["headers"].get(name) == value, (name, seen["headers"])

    return check


def seen_path(path: str, host: str | None = None) -> Check:
    def check(response: httpx.Response, seen: dict[str, Any]) -> None:
        assert seen["path"] == path, seen
        if host is not None:
            assert seen["headers"]["host"] == host, seen["headers"]

    return check


def answered(status: int, body: str | None = None, **headers: str) -> Check:
    def check(response: httpx.Response, seen: dict[str, Any]) -> None:
        assert response.status_code == status, response.text
        if body is not None:
            assert response.text == body
        for name, value in headers.items():
            assert response.headers.get(name.replace("_", "-")) == value, dict(response.headers)

    return check


FORWARDED = [
    ("header set, added, removed", "/headers/x", {"x-add": "mine", "x-drop": "gone", "user-agent": "curl"},
     seen_headers(("x-set", "100%"), ("x-add", "mine, added"), ("x-drop", None), ("user-agent", "gateway"))),
    ("response header set", "/headers/x", {}, answered(200, x_r="1")),
    ("prefix rewrite keeps the rest and the query", "/prefix/items/a/b?q=1", {}, seen_path("/v2/goods/a/b?q=1")),
    ("full path rewrite and host", "/full/any/thing?q=1", {}, seen_path("/status?q=1", host="full.internal")),
    ("regex rewrite", "/regex/first/second", {}, seen_path("/second/first")),
    ("an operation's part over its API's", "/mixed/open", {}, seen_headers(("x-op", "open"))),
]  # fmt: skip


@pytest.mark.parametrize(("case", "path", "headers", "check"), FORWARDED, ids=[row[0] for row in FORWARDED])
def test_shaping_is_seen_at_the_upstream(
    fleet: Fleet, case: str, path: str, headers: dict[str, str], check: Check
) -> None:
    response = fleet.gateway.request("GET", path, headers)

    assert response.status_code == 200, response.text
    check(response, response.json())


ANSWERED = [
    ("redirect", "/redirect/x?q=1", answered(301, location="https://new.example:8443/moved/x?q=1")),
    ("direct response", "/direct/anything", answered(418, "teapot\n", content_type="text/plain")),
    ("the API's answer where the operation has none", "/mixed/closed", answered(503, "closed\n")),
]


@pytest.mark.parametrize(("case", "path", "check"), ANSWERED, ids=[row[0] for row in ANSWERED])
def test_shaping_answers_at_the_gateway(fleet: Fleet, case: str, path: str, check: Check) -> None:
    before = len(fleet.upstream)

    response = fleet.gateway.request("GET", path)

    check(response, {})
    assert len(fleet.upstream) == before, "nothing reached the upstream"


def test_a_mirrored_request_reaches_the_mirror_too(fleet: Fleet) -> None:
    response = fleet.gateway.request("POST", "/mirror/orders?n=7", {"x-trace": "mirrored"})

    assert response.status_code == 200, response.text
    assert response.json()["upstream"] == "main"
    copy = eventually(
        lambda: next((r for r in fleet.mirror if r["headers"].get("x-trace") == "mirrored"), None),
        timeout=5,
        what="the mirror to receive the copy",
    )
    assert (copy["method"], copy["path"]) == ("POST", "/orders?n=7")


def test_shaping_that_forges_an_identity_header_is_refused_with_its_field_path(fleet: Fleet) -> None:
    forged = {"requestHeaderModifier": {"set": [{"name": "x-meshplane-application", "value": "good"}]}}
    doc = documents.api("forged", backends=[documents.backend(9001)], shaping=forged)

    response = fleet.north.put(object_path_of(doc), json=doc)

    assert response.status_code == 422, response.text
    fields = [error["path"] for error in response.json()["errors"]]
    assert fields == ["spec.shaping.requestHeaderModifier.set[0].name"]
    assert fleet.north.get(object_path_of(doc)).status_code == 404, "nothing stored"


def object_path_of(doc: dict[str, Any]) -> str:
    return object_path(REGISTRY.get(doc["kind"]), doc["metadata"]["project"], doc["metadata"]["name"])
