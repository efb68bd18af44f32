"""The `meshplane` command run as a user runs it: a subprocess, signed in to a server process or given a URL."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence

from meshplane_testing.meshplane import ServerProcess


def cli(args: Sequence[str], server: ServerProcess | str | None) -> tuple[list[str], dict[str, str]]:
    """The argv and environment of a CLI run, on a wide terminal, with no MESHPLANE_* settings inherited from the
    caller: signed in as the admin of a running `server`, or given `--server` with a bare URL (where none answers)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MESHPLANE_")}
    env["COLUMNS"] = "200"  # usage errors come in a panel as wide as the terminal: no path wrapped inside it
    argv = [sys.executable, "-m", "meshplane", *args]
    if isinstance(server, ServerProcess):
        env |= server.cli_env
    elif server is not None:
        argv += ["--server", server]
    return argv, env


def meshplane(
    *args: str, server: ServerProcess | str | None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the CLI to completion (at most 30 s); `server` as for `cli`."""
    argv, env = cli(args, server)
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=30, env=env, check=False)
