"""The agent's tasks run under the one supervisor: a port it cannot take, or its sync dying, stops it clearly."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import pytest

from meshplane.agent.runtime import Agent, assemble
from meshplane.config import AgentSettings
from meshplane.lifecycle import ListenError, TaskFailed
from meshplane_testing.process import free_port, port_open


def settings(tmp_path: Path, admin_address: str, xds_port: int) -> AgentSettings:
    return AgentSettings(
        cluster="edge",
        server=f"127.0.0.1:{free_port()}",  # nothing there: the agent keeps trying, serving its gateways
        state_dir=tmp_path,
        xds_address=f"127.0.0.1:{xds_port}",
        admin_address=admin_address,
        insecure=True,
        in_cluster=False,
    )


async def test_an_agent_whose_admin_port_is_taken_stops_naming_it_and_serves_nothing(tmp_path: Path) -> None:
    xds_port = free_port()
    with socket.create_server(("127.0.0.1", 0)) as taken:
        address = f"127.0.0.1:{taken.getsockname()[1]}"

        with pytest.raises(ListenError, match=f"cannot serve the agent's admin on {address}"):
            agent = await assemble(settings(tmp_path, address, xds_port))
            await asyncio.wait_for(agent.run(asyncio.Event()), 10)

    assert not port_open(xds_port)


async def test_an_agent_whose_sync_dies_stops_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def dies(self: Agent) -> None:
        raise RuntimeError("sync broke")

    monkeypatch.setattr(Agent, "sync", dies)
    xds_port, admin_port = free_port(), free_port()
    agent = await assemble(settings(tmp_path, f"127.0.0.1:{admin_port}", xds_port))

    with pytest.raises(TaskFailed, match="cp-sync failed: sync broke"):
        await asyncio.wait_for(agent.run(asyncio.Event()), 10)

    assert not port_open(xds_port) and not port_open(admin_port)


async def test_a_running_agent_rebuilds_its_gateways_when_its_key_expiry_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def waits(self: Agent) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(Agent, "sync", waits)
    admin_port = free_port()
    agent = await assemble(settings(tmp_path, f"127.0.0.1:{admin_port}", free_port()))
    rebuilds = 0
    rebuild = agent.rebuild

    async def counted() -> None:
        nonlocal rebuilds
        rebuilds += 1
        await rebuild()

    agent.rebuild = counted  # type: ignore[method-assign]
    stop = asyncio.Event()
    running = asyncio.create_task(agent.run(stop))
    try:
        for _ in range(100):
            if port_open(admin_port):
                break
            await asyncio.sleep(0.05)
        started = rebuilds

        agent.key_expiry.move_to(time.time())  # a key record ran out
        for _ in range(100):
            if rebuilds > started:
                break
            await asyncio.sleep(0.05)

        assert rebuilds == started + 1
    finally:
        stop.set()
        await asyncio.wait_for(running, 10)
