"""Proxyless gRPC clients for tests: gRPC's own xDS client, fed by an agent, in a process of its own.

gRPC keeps its xDS client and the bootstrap it read (`GRPC_XDS_BOOTSTRAP`) for the life of the process,
so every call runs in a fresh child (`python -m meshplane_testing.proxyless ...`) and nothing of it leaks into
the test process. The child calls a method with the request `hello` until a reply starts with what the
test expects, or its time is up, and prints the last outcome on a marked line. The child inherits the
environment, so `GRPC_VERBOSITY=debug GRPC_TRACE=xds_client` on the test run puts gRPC's view in its log.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import grpc

from meshplane_testing.process import running

REQUEST = b"hello"
_MARK = "proxyless-call: "
_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class CallResult:
    reached: bool
    last: str
    """The reply that matched, else the last reply or error seen."""
    log: str


def bootstrap(xds_port: int, node_id: str) -> dict:
    """gRPC's bootstrap: one xDS server (plaintext, xDS v3) and the client's node identity."""
    return {
        "xds_servers": [
            {
                "server_uri": f"127.0.0.1:{xds_port}",
                "channel_creds": [{"type": "insecure"}],
                "server_features": ["xds_v3"],
            }
        ],
        "node": {"id": node_id, "cluster": "proxyless-test"},
    }


def call_proxyless(
    tmp_path: Path, xds_port: int, target: str, method: str, expect: str, *, name: str, timeout: float = 15.0
) -> CallResult:
    """Run one client process named `name` until a reply from `target` starts with `expect` (or `timeout`)."""
    bootstrap_path = tmp_path / f"{name}-bootstrap.json"
    bootstrap_path.write_text(json.dumps(bootstrap(xds_port, name)))
    argv = [sys.executable, "-m", "meshplane_testing.proxyless", target, method, expect, "--timeout", str(timeout)]
    env = {"GRPC_XDS_BOOTSTRAP": str(bootstrap_path)}
    with running(argv, tmp_path / f"{name}.log", env, cwd=_ROOT) as process:
        code = process.popen.wait(timeout=timeout + 15)
        log = process.log()
    outcomes = [line.removeprefix(_MARK) for line in log.splitlines() if line.startswith(_MARK)]
    return CallResult(code == 0, outcomes[-1] if outcomes else "no outcome", log)


def call_until(target: str, method: str, expect: str, timeout: float) -> tuple[bool, str]:
    """(reached, the matching reply or the last reply or error). Each attempt has a short deadline of its
    own, as the first ones fail until the configuration is in."""
    deadline = time.monotonic() + timeout
    last = "no attempt"
    with grpc.insecure_channel(target) as channel:
        say = channel.unary_unary(method)  # no (de)serializers: bytes on the wire as they are
        while time.monotonic() < deadline:
            try:
                last = say(REQUEST, timeout=2.0).decode()
            except grpc.RpcError as error:
                last = f"{error.code().name}: {error.details()}"
            if last.startswith(expect):
                return True, last
            time.sleep(0.1)
    return False, last


def main() -> int:
    parser = argparse.ArgumentParser(description="Call a gRPC method until the reply starts with EXPECT.")
    parser.add_argument("target")
    parser.add_argument("method")
    parser.add_argument("expect")
    parser.add_argument("--timeout", type=float, default=15.0)
    args = parser.parse_args()
    reached, last = call_until(args.target, args.method, args.expect, args.timeout)
    print(_MARK + last, flush=True)
    return 0 if reached else 1


if __name__ == "__main__":
    sys.exit(main())
