"""A server whose north API port is taken fails with a message naming it, not with uvicorn's exit of the process."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from meshplane.config import ServerSettings
from meshplane.lifecycle import ListenError
from meshplane.server.main import run_server
from meshplane_testing.process import free_port, port_open


async def test_a_taken_north_api_port_stops_the_server_with_a_clear_error(tmp_path: Path) -> None:
    grpc_port = free_port()
    with socket.create_server(("127.0.0.1", 0)) as taken:
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        settings = ServerSettings(
            http_address=address, grpc_address=f"127.0.0.1:{grpc_port}", data_dir=tmp_path, insecure=True
        )

        with pytest.raises(ListenError, match=f"cannot serve the north API on {address}: Address already in use"):
            await asyncio.wait_for(run_server(settings, asyncio.Event()), 30)

    assert not port_open(grpc_port)
