"""A real Envoy started with the agent's bootstrap comes up and waits for its config over ADS."""

from __future__ import annotations

from pathlib import Path

import pytest

from meshplane_testing.envoy import run_envoy
from meshplane_testing.process import free_port

pytestmark = pytest.mark.envoy


def test_envoy_with_the_bootstrap_waits_for_ads(tmp_path: Path) -> None:
    xds_port = free_port()  # nothing listens: Envoy keeps retrying and stays initializing
    with run_envoy(tmp_path, "gw-test", xds_port) as envoy:
        dump = envoy.config_dump()
        bootstrap = next(c["bootstrap"] for c in dump["configs"] if "bootstrap" in c)
        assert bootstrap["node"]["id"] == "gw-test"
        assert bootstrap["dynamic_resources"]["ads_config"]["api_type"] == "GRPC"
        status, clusters = envoy.admin("/clusters")
        assert status == 200 and "meshplane-xds::127.0.0.1:" in clusters
        assert not envoy.live()
