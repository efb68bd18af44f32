"""A caller at the edge sends the headers Envoy obeys from trusted hops: a shorter upstream timeout, more
retries, a forged client address. Through a real Envoy serving the translated gateway, none of them changes
what happens, and the upstream learns the real client address; trusting one proxy in front
(`xff_num_trusted_hops = 1`) takes the address that proxy appended."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2

from meshplane.agent.translate import GatewaySettings, translate_apis
from meshplane_testing.envoy import run_envoy_config
from meshplane_testing.process import free_port
from meshplane_testing.static_bootstrap import static_bootstrap
from meshplane_testing.translate_factories import LOOPBACK, api, backend
from meshplane_testing.upstream import run_upstream

FORGED = {
    "x-envoy-upstream-rq-timeout-ms": "1",
    "x-envoy-max-retries": "5",
    "x-envoy-retry-on": "5xx",
    "x-forwarded-for": "10.0.0.1",
}
DELAY = 0.5
"""Seconds the slow upstream takes: far above the 1 ms a caller asks for, far below the API's timeout."""


def is_this_host(address: str) -> bool:
    """The test's client connects from this host; Envoy names a loopback peer by the host's own address."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family) as probe:
        try:
            probe.bind((address, 0))
        except OSError:
            return False
    return True


def manager(settings: GatewaySettings) -> hcm_pb2.HttpConnectionManager:
    listener = translate_apis([], settings).listeners[0]
    config = hcm_pb2.HttpConnectionManager()
    listener.filter_chains[0].filters[0].typed_config.Unpack(config)
    return config


def test_the_gateway_takes_the_client_address_from_the_connection_by_default() -> None:
    config = manager(GatewaySettings())
    assert config.use_remote_address.value is True
    assert config.xff_num_trusted_hops == 0
    assert manager(GatewaySettings(xff_num_trusted_hops=2)).xff_num_trusted_hops == 2


@contextlib.contextmanager
def gateway(tmp_path: Path, hops: int) -> Iterator[tuple[httpx.Client, list[dict[str, Any]], list[dict[str, Any]]]]:
    """A real Envoy serving /slow (an upstream that answers after DELAY) and /failing (one that answers 503);
    yields a client of it and what each upstream saw."""
    with (
        run_upstream("slow", delay=DELAY) as (slow, slow_seen),
        run_upstream("failing", status=503) as (failing, failing_seen),
    ):
        apis = [
            api("slow", basePath="/slow", backends=[backend(port=slow, timeout="10s")]),
            api("failing", basePath="/failing", backends=[backend(port=failing)]),
        ]
        port = free_port()
        config = translate_apis(apis, GatewaySettings(listener_port=port, backends=LOOPBACK, xff_num_trusted_hops=hops))
        with (
            run_envoy_config(tmp_path, f"edge-{hops}", static_bootstrap(config, admin_port=free_port())) as envoy,
            httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client,
        ):
            envoy.wait_live()
            envoy.wait_listener(port)
            yield client, slow_seen, failing_seen


@pytest.mark.envoy
def test_a_callers_timeout_retry_and_forwarding_headers_change_nothing(tmp_path: Path) -> None:
    with gateway(tmp_path, hops=0) as (client, slow_seen, failing_seen):
        started = time.monotonic()
        answer = client.get("/slow/x", headers=FORGED)
        assert answer.status_code == 200, answer.text
        assert time.monotonic() - started >= DELAY

        assert client.get("/failing/x", headers=FORGED).status_code == 503
        time.sleep(0.3)  # room for retries, were any to come
        assert len(failing_seen) == 1

        seen = slow_seen[-1]["headers"]
        client = seen["x-forwarded-for"].split(",")[-1].strip()
        assert client != "10.0.0.1" and is_this_host(client)
        assert seen["x-envoy-external-address"] == "127.0.0.1"  # the connection's peer: this test
        assert "x-envoy-upstream-rq-timeout-ms" not in seen and "x-envoy-max-retries" not in seen


@pytest.mark.envoy
def test_with_one_trusted_hop_the_address_that_proxy_appended_is_the_client(tmp_path: Path) -> None:
    with gateway(tmp_path, hops=1) as (client, slow_seen, failing_seen):
        answer = client.get("/slow/x", headers=FORGED)
        assert answer.status_code == 200, answer.text
        seen = slow_seen[-1]["headers"]
        assert seen["x-envoy-external-address"] == "10.0.0.1"
        forged, appended = (part.strip() for part in seen["x-forwarded-for"].split(","))
        assert forged == "10.0.0.1" and is_this_host(appended)

        assert client.get("/failing/x", headers=FORGED).status_code == 503
        time.sleep(0.3)
        assert len(failing_seen) == 1
