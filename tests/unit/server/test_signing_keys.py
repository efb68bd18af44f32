"""The server's signing keys on disk: ids that are safe to type, and retiring only what is there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from meshplane.server.signing import SigningKeys


def test_key_ids_are_hex_so_a_command_line_never_takes_one_for_an_option(tmp_path: Path) -> None:
    keys = SigningKeys(tmp_path / "signing")

    kids = [keys.rotate().kid for _ in range(40)]

    assert all(re.fullmatch(r"[0-9a-f]{24}", kid) for kid in kids)
    assert len(set(kids)) == 40
    assert keys.current().kid == kids[-1]


def test_retiring_names_only_keys_of_the_directory(tmp_path: Path) -> None:
    keys = SigningKeys(tmp_path / "signing")
    older = keys.rotate()
    keys.rotate()
    outside = tmp_path / "outside.pem"
    outside.write_text("not a key of this server")

    with pytest.raises(KeyError):
        keys.retire("../outside")
    keys.retire(older.kid)

    assert outside.exists()
    assert older.kid not in {key.kid for key in keys.all()}
    assert keys.retired() == {older.kid}
