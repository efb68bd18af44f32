"""Reading a real Envoy's stats for the per-API figures: what is read is what requests reached, so a catalog
of APIs nobody calls costs the gateway and the agent nothing to read, whatever its size."""

from __future__ import annotations

import http.client
from pathlib import Path

import pytest

from meshplane.agent.api_figures import read_gateway_stats
from meshplane.agent.translate import GatewaySettings, translate_apis
from meshplane_testing.envoy import envoy_binary, run_envoy_config
from meshplane_testing.process import free_port
from meshplane_testing.static_bootstrap import static_bootstrap
from meshplane_testing.translate_factories import LOOPBACK, api, backend
from meshplane_testing.upstream import run_upstream

pytestmark = [pytest.mark.envoy, pytest.mark.timeout(60)]

CATALOG = 40


def get(port: int, path: str) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", path, headers={"Host": "gateway.test"})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


async def test_only_the_apis_requests_reached_are_read(tmp_path: Path) -> None:
    envoy_binary()
    with run_upstream("one") as (upstream, _):
        port, admin = free_port(), free_port()
        apis = [api(f"a{index}", basePath=f"/a{index}", backends=[backend(port=upstream)]) for index in range(CATALOG)]
        config = translate_apis(apis, GatewaySettings(backends=LOOPBACK, listener_port=port))
        with run_envoy_config(tmp_path, "gateway", static_bootstrap(config, admin_port=admin)) as envoy:
            envoy.wait_live()
            envoy.wait_listener(port)
            assert [get(port, "/a7/x") for _ in range(3)] == [200] * 3

            read = await read_gateway_stats(f"127.0.0.1:{admin}")

    assert list(read.figures) == ["shop/a7"]
    assert read.figures["shop/a7"].requests == 3
    assert read.figures["shop/a7"].by_class == {"2xx": 3}
    assert read.uptime is not None
