"""A private Redis server for tests: loopback only, on a free port, nothing persisted."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from meshplane_testing.process import free_port, port_open, require_binary, running


@dataclass(frozen=True, slots=True)
class RedisServer:
    port: int

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


@contextlib.contextmanager
def start_redis(work_dir: Path) -> Iterator[RedisServer]:
    """Start `redis-server` (skipping, or failing under CI, without it); stop it after."""
    binary = require_binary("redis-server")
    port = free_port()
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    argv += ["--dir", str(work_dir)]
    with running(argv, work_dir / "redis.log") as server:
        server.wait_ready(lambda: port_open(port), timeout=30, what=f"redis-server on port {port}")
        yield RedisServer(port)
