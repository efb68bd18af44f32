"""The enforcer's settings: the fixed defaults of DESIGN §14, overridable like every process's."""

from __future__ import annotations

import os
import socket

import pytest

from meshplane.enforcer.settings import EnforcerSettings


def test_defaults_listen_and_dial_on_the_fixed_loopback_ports() -> None:
    settings = EnforcerSettings.load()

    assert (settings.grpc_address, settings.xds_address) == ("127.0.0.1:18081", "127.0.0.1:18001")
    assert settings.node_id == f"enforcer-{socket.gethostname()}-{os.getpid()}"
    assert settings.metrics_address is None


def test_flags_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MESHPLANE_METRICS_ADDRESS", "127.0.0.1:9102")
    monkeypatch.setenv("MESHPLANE_NODE_ID", "from-env")

    settings = EnforcerSettings.load(node_id="from-flag")

    assert (settings.node_id, settings.metrics_address) == ("from-flag", "127.0.0.1:9102")


@pytest.mark.parametrize("flags", [{"grpc_address": "18081"}, {"metrics_address": "host:0"}])
def test_bad_values_are_refused(flags: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        EnforcerSettings.load(**flags)
