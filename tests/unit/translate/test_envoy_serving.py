"""Requests through a real Envoy serving the translated config: matching, 404s, rewrites and backend choice
as Envoy itself does them, not as our interpreter of the route table believes."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from meshplane.agent.translate import GatewaySettings, translate_apis
from meshplane_testing.envoy import EnvoyProcess, envoy_binary, run_envoy_config
from meshplane_testing.process import free_port
from meshplane_testing.static_bootstrap import static_bootstrap
from meshplane_testing.translate_factories import LOOPBACK, api, backend
from meshplane_testing.upstream import run_upstream

pytestmark = pytest.mark.envoy


@dataclass
class Gateway:
    envoy: EnvoyProcess
    port: int

    def request(self, method: str, path: str, host: str = "gateway.test") -> tuple[int, dict | None]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        try:
            connection.request(method, path, headers={"Host": host})
            response = connection.getresponse()
            body = response.read()
        finally:
            connection.close()
        ok = response.status == 200 and method != "HEAD"
        return response.status, json.loads(body) if ok else None

    def forwarded(self, method: str, path: str, host: str = "gateway.test") -> tuple[str, str]:
        """(upstream name, path it received) of a request that must succeed."""
        status, seen = self.request(method, path, host)
        assert status == 200 and seen is not None, (method, path, status, self.envoy.log()[-2000:])
        return seen["upstream"], seen["path"]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    envoy_binary()
    with ExitStack() as stack:
        one, _ = stack.enter_context(run_upstream("one"))
        two, _ = stack.enter_context(run_upstream("two"))
        apis = [
            api(
                "orders",
                basePath="/orders",
                operations=[
                    {"method": "GET", "path": "/items"},
                    {"method": "POST", "path": "/items"},
                    {"method": "GET", "path": "/items/{id}"},
                    {"method": "GET", "path": "/files/*"},
                ],
                backends=[backend(port=one, basePath="/", timeout="15s")],
            ),
            api("legacy", basePath="/legacy", backends=[backend(port=two, basePath="/v2")]),
            api("tenants", basePath="/t/{tenant}", backends=[backend(port=one)]),
            api("dns", basePath="/dns", backends=[backend("localhost", two, basePath="/by-name")]),
            api(
                "split",
                basePath="/split",
                backends=[backend(port=one, weight=1), backend(port=two, weight=0), backend(port=two, weight=1)],
            ),
            api("only-two", basePath="/only-two", backends=[backend(port=one, weight=0), backend(port=two)]),
            api(
                "site",
                "web",
                basePath="/",
                hostnames=["www.example.com"],
                backends=[backend(port=two, basePath="/site")],
            ),
        ]
        port = free_port()
        config = translate_apis(apis, GatewaySettings(backends=LOOPBACK, listener_port=port))
        tmp_path: Path = tmp_path_factory.mktemp("envoy")
        envoy = stack.enter_context(
            run_envoy_config(tmp_path, "gateway", static_bootstrap(config, admin_port=free_port()))
        )
        envoy.wait_live()
        envoy.wait_listener(port)
        yield Gateway(envoy, port)


@pytest.mark.parametrize(
    ("method", "path", "upstream", "forwarded"),
    [
        ("GET", "/orders/items", "one", "/items"),
        ("GET", "/orders/items?page=2&next=/orders/x", "one", "/items?page=2&next=/orders/x"),
        ("POST", "/orders/items", "one", "/items"),
        ("GET", "/orders/items/42", "one", "/items/42"),
        ("GET", "/orders/files", "one", "/files"),
        ("GET", "/orders/files/a/b.txt", "one", "/files/a/b.txt"),
        ("DELETE", "/legacy", "two", "/v2"),
        ("GET", "/legacy/", "two", "/v2/"),
        ("GET", "/legacy/a/b?c=d", "two", "/v2/a/b?c=d"),
        ("GET", "/t/acme/reports?y=1", "one", "/reports?y=1"),
        ("GET", "/dns/x", "two", "/by-name/x"),
        ("GET", "/only-two/x", "two", "/x"),
        ("GET", "/orders/items/../files/x", "one", "/files/x"),
    ],
)
def test_declared_requests_reach_their_backend_rewritten(
    gateway: Gateway, method: str, path: str, upstream: str, forwarded: str
) -> None:
    assert gateway.forwarded(method, path) == (upstream, forwarded)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("DELETE", "/orders/items"),
        ("HEAD", "/orders/items"),
        ("GET", "/orders/items/42/more"),
        ("GET", "/orders/other"),
        ("GET", "/orders"),
        ("GET", "/ordersx/items"),
        ("GET", "/legacyx"),
        ("GET", "/t"),
        ("GET", "/"),
        ("GET", "/orders/items/../../legacy-ish"),
    ],
)
def test_undeclared_requests_get_404(gateway: Gateway, method: str, path: str) -> None:
    assert gateway.request(method, path)[0] == 404


def test_hostnames_choose_the_apis(gateway: Gateway) -> None:
    assert gateway.forwarded("GET", "/about?x=1", host="www.example.com:8443") == ("two", "/site/about?x=1")
    assert gateway.forwarded("GET", "/orders/items", host="www.example.com") == ("one", "/items")
    assert gateway.request("GET", "/about", host="example.com")[0] == 404


def test_weighted_backends_share_traffic(gateway: Gateway) -> None:
    seen = {gateway.forwarded("GET", f"/split/{i}")[0] for i in range(40)}
    assert seen == {"one", "two"}
