"""The one way tests and benchmarks start and stop a process: bounded start-up, a log file, and a kill at the end."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from meshplane_testing.eventually import eventually

# Below Linux's default ephemeral range (32768-60999): the kernel never hands these to a connection's source
# port or to a bind to port 0, so a picked port stays free until the child that was told it binds it.
_PORTS_LOW, _PORTS_HIGH = 10000, 32767
_WORKER_SLICES = 8
_next_port: dict[int, int] = {}


def _worker_slice() -> range:
    """This pytest-xdist worker's own share of the range, so two workers never pick the same port."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) % _WORKER_SLICES if worker.isdigit() else 0
    width = (_PORTS_HIGH - _PORTS_LOW + 1) // _WORKER_SLICES
    return range(_PORTS_LOW + index * width, _PORTS_LOW + (index + 1) * width)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A loopback TCP port that nothing listens on and that no other picker here hands out: this worker's
    ports are taken in turn, starting at a point set by the process id, so a port is not reused until the
    whole slice has gone round."""
    ports = _worker_slice()
    start = _next_port.get(ports.start, os.getpid() % len(ports))
    for step in range(len(ports)):
        offset = (start + step) % len(ports)
        if _bindable(ports[offset]):
            _next_port[ports.start] = offset + 1
            return ports[offset]
    raise RuntimeError(f"no free loopback port in {ports.start}-{ports.stop - 1}")


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0


class MissingRequirement(Exception):
    """An outside program or file is not here; tests/conftest.py decides whether that skips or fails a test."""


def require_binary(name: str, *candidates: str) -> str:
    """The path of a binary, or MissingRequirement saying which one is not installed."""
    for candidate in (*candidates, name):
        found = shutil.which(candidate) or (candidate if os.path.isfile(candidate) else None)
        if found:
            return found
    raise MissingRequirement(f"{name} is not installed (CI installs it; see .ci/run)")


class Process:
    """A child process with its output in a log file; `stop()` always leaves nothing running."""

    def __init__(self, argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None, **popen):
        self.argv = list(argv)
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - lives as long as the process
        self.popen = subprocess.Popen(
            self.argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            start_new_session=True,
            **popen,
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, check: Callable[[], bool], timeout: float = 30.0, what: str = "") -> None:
        def ready() -> bool:
            if not self.alive():
                raise RuntimeError(f"{self.argv[0]} exited with {self.popen.returncode}:\n{self.log()[-4000:]}")
            return check()

        try:
            eventually(ready, timeout=timeout, what=what or self.argv[0])
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\n{self.log()[-4000:]}") from None

    def kill(self) -> None:
        """kill -9 of the whole process group, as a crash would do."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(timeout=10)

    def stop(self, timeout: float = 10.0) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()


@contextlib.contextmanager
def running(argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None, **popen) -> Iterator[Process]:
    process = Process(argv, log_path, env, **popen)
    try:
        yield process
    finally:
        process.stop()
