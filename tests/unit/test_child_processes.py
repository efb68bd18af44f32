"""Children of `meshplane demo` die with it, even when it is killed with SIGKILL and has no chance to stop
them: they run in sessions of their own (a terminal's Ctrl-C reaches only the demo, which stops them in
order), so nothing else would reach them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PARENT = """
import asyncio, sys
from pathlib import Path
from meshplane.child_processes import start_child

async def main() -> None:
    child = await start_child([sys.executable, "-c", "import time; time.sleep(60)"], Path(sys.argv[1]))
    print(child.pid, flush=True)
    await asyncio.sleep(60)

asyncio.run(main())
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A child that died but was not reaped yet (its parent is gone: init reaps it soon) counts as gone.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_a_child_dies_when_its_parent_is_killed(tmp_path: Path) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path / "child.log")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert _alive(child)
        assert os.getsid(child) == child  # its own session: a terminal's signals do not reach it
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child)
    finally:
        parent.kill()
        parent.wait(10)
