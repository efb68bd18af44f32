"""Files that hold secrets (keys, tokens, the store): readable and writable by their owner only, written in one step.

A secret is written to a fresh temporary file beside its target, created exclusively with mode 0600 (a
permissive umask cannot widen it), flushed to disk, and only then put in place: by a rename when it replaces
the target, by a hard link when it must not. A reader, or a process that crashed half-way, therefore sees the
old file or the whole new one, never a part; a failed write leaves no file behind. Certificates stored beside
their keys take the same path with `mode=0o644`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

OWNER_ONLY = 0o600
"""The mode of a secret: its owner reads and writes it, nobody else."""


def create(path: Path, data: bytes, *, mode: int = OWNER_ONLY) -> None:
    """Put `data` at `path` in one step; FileExistsError, and `path` untouched, when it already exists."""
    partial = _written(path, data, mode)
    try:
        os.link(partial, path)
    finally:
        partial.unlink()
    _sync_directory(path.parent)


def replace(path: Path, data: bytes, *, mode: int = OWNER_ONLY) -> None:
    """Put `data` at `path` in one step, in place of what is there: readers see the old file or the new one."""
    partial = _written(path, data, mode)
    try:
        os.replace(partial, path)
    except BaseException:
        partial.unlink()
        raise
    _sync_directory(path.parent)


def ensure_private(path: Path) -> None:
    """`path` exists with its owner as its only reader: created empty if missing, else tightened as `tighten`."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, OWNER_ONLY))
    tighten(path)


def tighten(path: Path) -> None:
    """Set an existing `path` to 0600 when its group or others have any access to it; nothing when it is missing."""
    with contextlib.suppress(FileNotFoundError):
        if stat.S_IMODE(path.stat().st_mode) & 0o077:
            path.chmod(OWNER_ONLY)


def _written(path: Path, data: bytes, mode: int) -> Path:
    """A new hidden file beside `path` holding `data`, on disk; removed again when writing it fails."""
    partial = path.with_name(f".{path.name}.{secrets.token_hex(6)}.partial")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(descriptor, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        partial.unlink()
        raise
    return partial


def _sync_directory(directory: Path) -> None:
    """Make the new name itself durable: a rename or link lives in the directory, not in the file."""
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
