"""The rate limiter's xDS feed is watched like every process's tasks: if it dies, the limiter says so and stops."""

from __future__ import annotations

import asyncio

import pytest

from meshplane.lifecycle import TaskFailed
from meshplane.ratelimiter.main import run_ratelimiter
from meshplane.ratelimiter.settings import RateLimiterSettings
from meshplane.xds.client import DeltaClient
from meshplane_testing.process import free_port, port_open


async def test_the_rate_limiter_stops_naming_its_xds_feed_when_the_feed_dies(monkeypatch: pytest.MonkeyPatch) -> None:
    async def dies(self: DeltaClient) -> None:
        raise RuntimeError("the feed broke")

    monkeypatch.setattr(DeltaClient, "run", dies)
    grpc_port = free_port()
    settings = RateLimiterSettings(grpc_address=f"127.0.0.1:{grpc_port}", xds_address=f"127.0.0.1:{free_port()}")

    with pytest.raises(TaskFailed, match="ratelimiter-xds failed: the feed broke"):
        await asyncio.wait_for(run_ratelimiter(settings, asyncio.Event()), 5)

    assert not port_open(grpc_port)
