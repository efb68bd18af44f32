"""Secret files are 0600 whatever the umask, appear whole or not at all, and leave nothing behind on failure."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from meshplane import secret_files

Write = Callable[[Path, bytes], None]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    previous = os.umask(0)  # anything not asked to be private would come out world-writable
    try:
        yield
    finally:
        os.umask(previous)


@pytest.mark.usefixtures("permissive_umask")
@pytest.mark.parametrize("write", [secret_files.create, secret_files.replace])
def test_a_secret_is_written_readable_by_its_owner_only(tmp_path: Path, write: Write) -> None:
    path = tmp_path / "key.pem"

    write(path, b"secret")

    assert path.read_bytes() == b"secret"
    assert _mode(path) == 0o600


@pytest.mark.usefixtures("permissive_umask")
def test_a_certificate_beside_its_key_takes_the_mode_it_asks_for(tmp_path: Path) -> None:
    path = tmp_path / "agent.crt"

    secret_files.create(path, b"certificate", mode=0o644)

    assert _mode(path) == 0o644


def test_replacing_puts_the_new_content_in_place_of_the_old(tmp_path: Path) -> None:
    path = tmp_path / "admin-token"
    path.write_bytes(b"old")
    path.chmod(0o644)
    readers_file = path.open("rb")  # a reader holding the old file keeps reading all of it

    secret_files.replace(path, b"new")

    assert path.read_bytes() == b"new"
    assert _mode(path) == 0o600
    assert readers_file.read() == b"old"
    readers_file.close()
    assert os.listdir(tmp_path) == ["admin-token"]


def test_creating_never_replaces_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "ca.key"
    path.write_bytes(b"the operator's key")

    with pytest.raises(FileExistsError):
        secret_files.create(path, b"another key")

    assert path.read_bytes() == b"the operator's key"
    assert os.listdir(tmp_path) == ["ca.key"]


@pytest.mark.parametrize("write", [secret_files.create, secret_files.replace])
def test_a_failed_write_leaves_no_file_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write: Write) -> None:
    def disk_full(_descriptor: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)

    with pytest.raises(OSError, match="No space left"):
        write(tmp_path / "server.key", b"secret")

    assert os.listdir(tmp_path) == []


def test_a_failed_replace_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "server.key"
    path.write_bytes(b"old")

    def refused(_source: object, _target: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", refused)

    with pytest.raises(PermissionError):
        secret_files.replace(path, b"new")

    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["server.key"]


@pytest.mark.usefixtures("permissive_umask")
def test_a_missing_private_file_is_created_empty_and_private(tmp_path: Path) -> None:
    path = tmp_path / "meshplane.db"

    secret_files.ensure_private(path)

    assert path.read_bytes() == b""
    assert _mode(path) == 0o600


def test_an_existing_private_file_keeps_its_content_and_loses_its_loose_permissions(tmp_path: Path) -> None:
    path = tmp_path / "meshplane.db"
    path.write_bytes(b"every object")
    path.chmod(0o664)

    secret_files.ensure_private(path)

    assert path.read_bytes() == b"every object"
    assert _mode(path) == 0o600


def test_tightening_leaves_a_private_file_alone_and_a_missing_one_missing(tmp_path: Path) -> None:
    owner_read_only = tmp_path / "meshplane.db-wal"
    owner_read_only.write_bytes(b"")
    owner_read_only.chmod(0o400)

    secret_files.tighten(owner_read_only)
    secret_files.tighten(tmp_path / "meshplane.db-shm")

    assert _mode(owner_read_only) == 0o400
    assert not (tmp_path / "meshplane.db-shm").exists()
