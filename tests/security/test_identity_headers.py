"""The caller plays the gateway: it sends the identity headers the gateway sets for upstreams and logs.

On a gateway whose APIs ask for no credential at all, nothing would ever overwrite them, so whatever the
caller wrote would reach the upstream as its application, plan and key, and the access log would say so.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import pytest

from meshplane.dataplane import IDENTITY_HEADERS
from meshplane_testing import documents
from meshplane_testing.envoy import EnvoyProcess, run_envoy
from meshplane_testing.eventually import eventually
from meshplane_testing.gateway import Gateway
from meshplane_testing.meshplane import run_agent, run_server
from meshplane_testing.upstream import run_upstream

pytestmark = [pytest.mark.envoy, pytest.mark.timeout(90)]


@pytest.fixture(scope="module")
def open_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, EnvoyProcess]]:
    """A gateway whose only API authenticates no one."""
    tmp = tmp_path_factory.mktemp("identity")
    with contextlib.ExitStack() as stack:
        port, _ = stack.enter_context(run_upstream("open"))
        server = stack.enter_context(run_server(tmp))
        server.put(documents.api("open", backends=[documents.backend(port)]))
        agent = stack.enter_context(run_agent(tmp, "edge", server))
        envoy = stack.enter_context(run_envoy(tmp, "gw-edge", agent.xds_port))
        envoy.wait_listener(agent.gateway_port)
        gateway = Gateway(agent.gateway_port)
        stack.callback(gateway.close)
        gateway.wait_for("/open/x", lambda r: r.status_code == 200, timeout=30)
        yield gateway, envoy


def test_identity_headers_a_caller_sends_to_an_open_api_reach_neither_upstream_nor_log(
    open_gateway: tuple[Gateway, EnvoyProcess],
) -> None:
    gateway, envoy = open_gateway
    forged = {name: "forged" for name in IDENTITY_HEADERS}

    response = gateway.request("GET", "/open/x", forged)

    assert response.status_code == 200, response.text
    seen = response.json()["headers"]
    assert [name for name in IDENTITY_HEADERS if name in seen] == []
    line = eventually(lambda: _line(envoy, seen["x-request-id"]), timeout=10, what="the request's access-log line")
    assert (line["application"], line["plan"], line["key_id"]) == (None, None, None)


def _line(envoy: EnvoyProcess, request_id: str) -> dict[str, Any] | None:
    lines = (json.loads(text) for text in envoy.log().splitlines() if text.startswith("{"))
    return next((line for line in lines if line.get("request_id") == request_id), None)
