"""The enforcer process under the one supervisor: what it cannot serve without stops it, saying what."""

from __future__ import annotations

import asyncio
import socket

import pytest

from meshplane.enforcer.process import run_enforcer
from meshplane.enforcer.settings import EnforcerSettings
from meshplane.lifecycle import ListenError, TaskFailed
from meshplane.xds.client import DeltaClient
from meshplane_testing.process import free_port, port_open


def settings(grpc_port: int, metrics_address: str | None = None) -> EnforcerSettings:
    return EnforcerSettings(
        grpc_address=f"127.0.0.1:{grpc_port}", xds_address=f"127.0.0.1:{free_port()}", metrics_address=metrics_address
    )


async def test_an_enforcer_whose_metrics_port_is_taken_stops_naming_it_and_answers_nothing() -> None:
    grpc_port = free_port()
    with socket.create_server(("127.0.0.1", 0)) as taken:
        address = f"127.0.0.1:{taken.getsockname()[1]}"

        with pytest.raises(ListenError, match=f"cannot serve the enforcer metrics on {address}"):
            await asyncio.wait_for(run_enforcer(settings(grpc_port, address), asyncio.Event()), 5)

    assert not port_open(grpc_port)


async def test_an_enforcer_whose_feed_dies_stops_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    async def dies(self: DeltaClient) -> None:
        raise RuntimeError("the feed broke")

    monkeypatch.setattr(DeltaClient, "run", dies)
    grpc_port = free_port()

    with pytest.raises(TaskFailed, match="enforcer-xds failed: the feed broke"):
        await asyncio.wait_for(run_enforcer(settings(grpc_port), asyncio.Event()), 5)

    assert not port_open(grpc_port)
