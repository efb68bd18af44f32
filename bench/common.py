"""What the control-plane benchmarks share: store selection, API documents, statistics and the report."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from meshplane_testing.meshplane import ServerProcess, run_server
from meshplane_testing.postgres import PostgresServer, _packaged_servers, start_postgres
from meshplane_testing.process import MissingRequirement, free_port, port_open, require_binary, running

PROJECT = "default"
SQLITE = "sqlite"
POSTGRESQL = "postgresql"


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of a non-empty sequence."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


def distribution(values: Sequence[float], digits: int = 2) -> dict[str, float]:
    """p50/p90/p99/max of a sample, rounded: what every report shows for a latency."""
    return {
        "p50": round(percentile(values, 0.50), digits),
        "p90": round(percentile(values, 0.90), digits),
        "p99": round(percentile(values, 0.99), digits),
        "max": round(max(values), digits),
    }


def ratio(measured: float, floor: float) -> float | None:
    """measured / floor to three significant digits, or None when the floor is zero (nothing to compare with)."""
    return float(f"{measured / floor:.3g}") if floor else None


def parser(doc: str, quick_help: str) -> argparse.ArgumentParser:
    """The benchmarks' common command line: the module docstring as description, and `--quick`."""
    result = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    result.add_argument("--quick", action="store_true", help=quick_help)
    return result


def add_store_arguments(arguments: argparse.ArgumentParser) -> None:
    """`--sqlite` / `--postgres` pick one store; neither: both, or SQLite alone without PostgreSQL's binaries."""
    group = arguments.add_mutually_exclusive_group()
    group.add_argument("--sqlite", action="store_true", help="only the server on SQLite")
    group.add_argument("--postgres", action="store_true", help="only the server on a private PostgreSQL")


def selected_stores(args: argparse.Namespace) -> list[str]:
    if args.sqlite:
        return [SQLITE]
    if args.postgres:
        return [POSTGRESQL]
    return [SQLITE, POSTGRESQL] if have_postgres() else [SQLITE]


def have_postgres() -> bool:
    """Whether the test harness can start a PostgreSQL here (it looks for the binaries the same way)."""
    try:
        require_binary("postgres", *_packaged_servers())
    except MissingRequirement:
        return False
    return True


@contextlib.contextmanager
def postgres_for(work: Path, stores: Sequence[str]) -> Iterator[PostgresServer | None]:
    """A private PostgreSQL for the whole run (logs under work/postgres) when a store needs it; else None."""
    if POSTGRESQL not in stores:
        yield None
        return
    (work / "postgres").mkdir(exist_ok=True)
    with start_postgres(work / "postgres") as server:
        yield server


async def database_url(store: str, database: PostgresServer | None) -> str | None:
    """None for SQLite (the server's own file); for PostgreSQL, a fresh database on `database`."""
    if store != POSTGRESQL:
        return None
    assert database is not None, "PostgreSQL asked for without a server"
    return await database.create_database()


def server_on(work: Path, store: str, url: str | None) -> contextlib.AbstractContextManager[ServerProcess]:
    """A management server for `store` whose data (and log) are named after it, on `url` (see database_url)."""
    return run_server(work, url, name=f"server-{store}")


@contextlib.contextmanager
def nginx(work: Path, body: str = "ok") -> Iterator[int]:
    """nginx on a free port answering 200 with `body` (nginx variables allowed, e.g. `$request_uri`) from
    memory, one worker, TCP_NODELAY: a fast upstream outside this process; its port."""
    port = free_port()
    home = work / f"nginx-{port}"
    home.mkdir()
    conf = home / "nginx.conf"
    conf.write_text(
        f"worker_processes 1; daemon off; pid {home}/nginx.pid; error_log stderr warn;\n"
        "events { worker_connections 1024; }\n"
        f"http {{ access_log off; client_body_temp_path {home}; proxy_temp_path {home}; tcp_nodelay on;\n"
        f"  server {{ listen 127.0.0.1:{port}; keepalive_requests 1000000;\n"
        f'    location / {{ default_type text/plain; return 200 "{body}"; }} }} }}\n'
    )
    argv = [require_binary("nginx", "/usr/sbin/nginx"), "-c", str(conf), "-p", str(home)]
    with running(argv, home / "nginx.log") as process:
        process.wait_ready(lambda: port_open(port), 15.0, "nginx")
        yield port


def api_path(name: str) -> str:
    return f"/v1/projects/{PROJECT}/apis/{name}"


def rss_bytes(pid: int) -> int:
    """Resident set size of a process, from /proc (no psutil needed)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU a process has used so far, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_quiet(pid: int, timeout: float, window: float = 0.25, busy: float = 0.25, calm: int = 4) -> float:
    """Until a process has used under `busy` of a core in each of `calm` windows in a row (it has digested
    what came before, e.g. the aftermath of many agents connecting); the seconds that took. TimeoutError
    past `timeout`."""
    started = time.monotonic()
    quiet = 0
    while quiet < calm:
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"process {pid} stayed busy for {timeout}s")
        used = cpu_seconds(pid)
        time.sleep(window)
        quiet = quiet + 1 if cpu_seconds(pid) - used < busy * window else 0
    return time.monotonic() - started - calm * window


def raise_fd_limit() -> None:
    """Many streams and processes: take the hard file-descriptor limit as the soft one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def emit(report: dict[str, Any], started: float) -> None:
    """Print the one JSON object a benchmark produces, with its wall time (from time.monotonic())."""
    report["wall_seconds"] = round(time.monotonic() - started, 1)
    print(json.dumps(report, indent=2), flush=True)


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1000.0}


def _millis(text: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()  # type: ignore[union-attr]
    return float(number) * _UNITS[unit]


def wrk(
    url: str, headers: dict[str, str], seconds: int, connections: int, script: Path | None = None
) -> dict[str, float]:
    """wrk (one thread, `connections` connections) at `url` for `seconds`, each request made by the Lua
    `script` when given: the requests made, the rate, the latency and how many answers were not 2xx or 3xx."""
    argv = [require_binary("wrk"), "-t1", f"-c{connections}", f"-d{seconds}s", "--latency"]
    for name, value in headers.items():
        argv += ["-H", f"{name}: {value}"]
    if script is not None:
        argv += ["-s", str(script)]
    out = subprocess.run([*argv, url], capture_output=True, text=True, timeout=seconds + 30, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    latency = {p: _millis(re.search(rf"\s{p}%\s+(\S+)", out).group(1)) for p in ("50", "99")}  # type: ignore[union-attr]
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return {
        "requests": int(re.search(r"(\d+) requests in", out).group(1)),  # type: ignore[union-attr]
        "rps": rps,
        "p50_ms": latency["50"],
        "p99_ms": latency["99"],
        "non_2xx": int(non_2xx.group(1)) if non_2xx else 0,
    }
