"""Access logs and per-API figures end to end: a server, two clusters' agents and Envoys, real requests.

Cluster `edge` logs to stdout (the default), which its Envoy's process log holds, and to an OTLP collector;
cluster `quiet` has its access log off. Each line is parsed as JSON and held to the request that made it
(by request id).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
import jwt
import pytest

from meshplane_testing import documents
from meshplane_testing.envoy import EnvoyProcess, run_envoy
from meshplane_testing.eventually import eventually
from meshplane_testing.gateway import Gateway, status
from meshplane_testing.meshplane import AgentProcess, run_agent, run_server
from meshplane_testing.north import put
from meshplane_testing.otlp_logs import run_otlp_logs_collector
from meshplane_testing.process import free_port
from meshplane_testing.upstream import run_upstream

pytestmark = [pytest.mark.envoy, pytest.mark.timeout(120)]

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
TRACEPARENT = f"00-{TRACE_ID}-b7ad6b7169203331-01"


@dataclass
class Cluster:
    agent: AgentProcess
    envoy: EnvoyProcess
    gateway: Gateway

    def lines(self) -> list[dict[str, Any]]:
        """The access-log lines in the Envoy's output (its own messages are not JSON objects)."""
        return [json.loads(line) for line in self.envoy.log().splitlines() if line.startswith("{")]

    def line_of(self, field: str, value: str) -> dict[str, Any]:
        """The line whose `field` is `value`, once the gateway has written it out."""
        return eventually(
            lambda: next((line for line in self.lines() if line.get(field) == value), None),
            timeout=10,
            what=f"the access-log line with {field} {value!r}",
        )


@dataclass
class Fleet:
    edge: Cluster
    quiet: Cluster
    key: str
    upstream_port: int
    otlp: list[dict[str, Any]]


@contextlib.contextmanager
def cluster(stack: contextlib.ExitStack, tmp: Any, name: str, server: Any, *flags: str) -> Iterator[Cluster]:
    admin = free_port()
    extra = ["--envoy-admin-address", f"127.0.0.1:{admin}", *flags]
    agent = stack.enter_context(run_agent(tmp, name, server, extra=extra))
    envoy = stack.enter_context(run_envoy(tmp, f"gw-{name}", agent.xds_port, admin_port=admin))
    envoy.wait_listener(agent.gateway_port)
    gateway = Gateway(agent.gateway_port)
    stack.callback(gateway.close)
    yield Cluster(agent, envoy, gateway)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    tmp = tmp_path_factory.mktemp("access-log")
    with contextlib.ExitStack() as stack:
        port, _ = stack.enter_context(run_upstream("orders", status_by_path=True))
        otlp_port, otlp = stack.enter_context(run_otlp_logs_collector())
        server = stack.enter_context(run_server(tmp))
        north = stack.enter_context(server.http())
        backends = [documents.backend(port)]
        put(north, documents.api("keyed", backends=backends, authentication={"apiKey": {"header": "x-api-key"}},
                                 operations=[{"method": "GET", "path": "/items"}]))  # fmt: skip
        put(north, documents.api("figures", backends=backends))
        put(north, documents.application("mobile"))
        put(north, documents.subscription("mobile-keyed", application="mobile", api="keyed", plan="gold"))
        issued = north.post(f"/v1/projects/{documents.PROJECT}/applications/mobile/keys", json={})
        assert issued.status_code == 201, issued.text
        key = issued.json()["key"]
        otlp_flags = ("--access-log-otlp-endpoint", f"127.0.0.1:{otlp_port}")
        edge = stack.enter_context(cluster(stack, tmp, "edge", server, *otlp_flags))
        quiet = stack.enter_context(cluster(stack, tmp, "quiet", server, "--access-log", "off"))
        for each in (edge, quiet):
            each.gateway.wait_for("/keyed/items", status(200), headers={"x-api-key": key}, timeout=30)
            each.gateway.wait_for("/figures/ready", status(200))
        yield Fleet(edge, quiet, key, port, otlp)


def request_id(response: httpx.Response) -> str:
    """The id the gateway gave the request, as its upstream saw it."""
    return response.json()["headers"]["x-request-id"]


def test_an_api_key_call_is_one_json_line_with_every_field(fleet: Fleet) -> None:
    headers = {"x-api-key": fleet.key, "traceparent": TRACEPARENT}
    response = fleet.edge.gateway.request("GET", "/keyed/items?secret=in-the-query", headers)
    assert response.status_code == 200, response.text

    line = fleet.edge.line_of("request_id", request_id(response))

    claims = jwt.decode(fleet.key, options={"verify_signature": False})
    assert datetime.fromisoformat(line.pop("time")).timestamp() == pytest.approx(time.time(), abs=30)
    durations = {name: line.pop(name) for name in ("duration_ms", "request_duration_ms", "response_duration_ms")}
    assert all(isinstance(value, int) and value >= 0 for value in durations.values()), durations
    assert line.pop("bytes_received") == 0 and line.pop("bytes_sent") > 0
    assert line == {
        "request_id": request_id(response),
        "trace_id": TRACE_ID,
        "project": documents.PROJECT,
        "api": "keyed",
        "operation": "GET /items",
        "application": "mobile",
        "plan": "gold",
        "key_id": claims["jti"],
        "client_certificate_fingerprint": None,  # plain HTTP: no client certificate
        "method": "GET",
        "user_agent": f"python-httpx/{httpx.__version__}",
        "path": "/keyed/items",
        "status": 200,
        "response_flags": "-",
        "upstream_host": f"127.0.0.1:{fleet.upstream_port}",
    }
    assert fleet.key not in fleet.edge.envoy.log() and "in-the-query" not in fleet.edge.envoy.log()


REFUSED = [
    ("no route", "/nowhere", {"traceparent": "00-malformed-01"},
     {"status": 404, "response_flags": "NR", "api": None, "upstream_host": None, "trace_id": None}),
    ("no key", "/keyed/items", {}, {"status": 401, "api": "keyed", "application": None, "trace_id": None}),
    ("upstream 5xx", "/figures/status/503", {}, {"status": 503, "api": "figures", "operation": "", "plan": None}),
]  # fmt: skip


@pytest.mark.parametrize(("case", "path", "headers", "expected"), REFUSED, ids=[row[0] for row in REFUSED])
def test_a_call_that_fails_is_logged_with_its_status(
    fleet: Fleet, case: str, path: str, headers: dict[str, str], expected: dict[str, Any]
) -> None:
    mark = f"{case} {time.monotonic_ns()}"
    response = fleet.edge.gateway.request("GET", path, {**headers, "user-agent": mark})
    assert response.status_code == expected["status"], response.text

    line = fleet.edge.line_of("user_agent", mark)

    assert {name: line[name] for name in expected} == expected


def test_with_the_access_log_off_no_line_is_written(fleet: Fleet) -> None:
    response = fleet.quiet.gateway.request("GET", "/figures/quiet")
    assert response.status_code == 200, response.text
    marker = fleet.edge.gateway.request("GET", "/figures/edge")
    fleet.edge.line_of(
        "request_id", request_id(marker)
    )  # lines of both gateways are out by now: they flush each second

    assert fleet.quiet.lines() == []


def test_per_api_figures_count_requests_and_5xx_as_the_agent_reads_them(fleet: Fleet) -> None:
    admin = f"http://127.0.0.1:{fleet.quiet.agent.admin_port}/api_figures"

    def figures() -> dict[str, Any]:
        return httpx.get(admin, timeout=5).json()["apis"][f"{documents.PROJECT}/figures"]

    before = figures()  # the fixture's (and other tests') calls
    gateway = fleet.quiet.gateway
    answers = [gateway.request("GET", "/figures/ok").status_code for _ in range(7)]
    answers += [gateway.request("GET", "/figures/status/503").status_code for _ in range(3)]
    assert sorted(answers) == [200] * 7 + [503] * 3

    after = eventually(
        lambda: (now := figures())["requests"] >= before["requests"] + 10 and now,
        timeout=10,
        what="the agent to read the API's figures",
    )
    assert after["requests"] - before["requests"] == 10
    assert after["errors"] - before["errors"] == 3
    grew = {code: after["byClass"].get(code, 0) - before["byClass"].get(code, 0) for code in after["byClass"]}
    assert grew == {"2xx": 7, "5xx": 3}
    assert after["errorRatio"] == pytest.approx(after["errors"] / after["requests"])
    latency = eventually(  # Envoy computes quantiles when it flushes its stats, every 5 s
        lambda: figures()["latencyMs"], timeout=12, what="the API's latency quantiles"
    )
    assert 0 <= latency["p50"] <= latency["p99"] < 5000


def test_with_an_otlp_endpoint_the_gateway_exports_each_request_there_too(fleet: Fleet) -> None:
    response = fleet.edge.gateway.request("GET", "/keyed/items", {"x-api-key": fleet.key})
    assert response.status_code == 200, response.text
    wanted = request_id(response)

    record = eventually(
        lambda: next((r for r in list(fleet.otlp) if r["attributes"].get("request_id") == wanted), None),
        timeout=10,
        what="the OTLP collector to receive the request's record",
    )

    assert record["body"] == "GET /keyed/items 200"
    attributes = record["attributes"]
    assert (attributes["api"], attributes["application"], attributes["plan"]) == ("keyed", "mobile", "gold")
