"""Child processes that die with the process that started them.

A child runs in a session of its own, so a terminal's Ctrl-C reaches only its parent, which then stops its
children in order. Were the parent killed outright (SIGKILL, the OOM killer), nothing would stop them: on
Linux each child therefore asks the kernel for SIGTERM when its parent dies (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def _dies_with(parent: int) -> Callable[[], None] | None:
    """What a child runs before it starts: the parent-death signal (Linux only), and an exit at once if the
    parent died before the signal was asked for."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)

    def ask() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:
            os._exit(1)

    return ask


async def start_child(argv: Sequence[str | Path], log_path: Path) -> asyncio.subprocess.Process:
    """`argv` started in a session of its own, its output appended to `log_path`, dying with this process."""
    with open(log_path, "ab") as log:  # noqa: ASYNC230 - opened once, handed to the child
        return await asyncio.create_subprocess_exec(
            *map(str, argv),
            stdout=log,
            stderr=log,
            stdin=asyncio.subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_dies_with(os.getpid()),
        )
