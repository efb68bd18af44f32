"""`meshplane keys` and `meshplane signing-keys` as a user runs them, against a real server process."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import jwt
import pytest

from meshplane_testing import documents
from meshplane_testing.cli import meshplane
from meshplane_testing.meshplane import ServerProcess

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def mobile(server: ServerProcess) -> ServerProcess:
    """Application `mobile` in project `default`; the server."""
    with server.http() as http:
        assert http.put("/v1/projects/default/applications/mobile", json=documents.application("mobile")).is_success
    return server


def issue(server: ServerProcess, *args: str) -> dict:
    """A new key of `mobile` through the CLI (`-o json`): the whole answer."""
    result = meshplane("keys", "create", "mobile", "-o", "json", *args, server=server)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def listed(server: ServerProcess) -> dict[str, dict]:
    """`keys list mobile -o json`, by key id."""
    result = meshplane("keys", "list", "mobile", "-o", "json", server=server)
    assert result.returncode == 0, result.stderr
    return {view["id"]: view for view in json.loads(result.stdout)}


def test_key_only_prints_just_a_signed_key(mobile: ServerProcess) -> None:
    result = meshplane("keys", "create", "mobile", "--key-only", server=mobile)

    assert result.returncode == 0, result.stderr
    key = result.stdout.removesuffix("\n")
    assert "\n" not in key
    assert len(key.split(".")) == 3
    assert all(key.split("."))


def test_json_answer_holds_the_id_and_the_key(mobile: ServerProcess) -> None:
    answer = issue(mobile, "--expires-in", "720h")

    assert answer["id"].startswith("k-")
    assert answer["key"].count(".") == 2
    assert (answer["kind"], answer["revoked"]) == ("signed", False)
    assert answer["expires"]


def test_table_shows_the_key_once_on_its_own_line(mobile: ServerProcess) -> None:
    result = meshplane("keys", "create", "mobile", server=mobile)

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    [key] = [line for line in lines if line.count(".") == 2 and " " not in line]
    assert result.stdout.count(key) == 1
    assert "not shown again" in result.stdout
    assert lines[0].split() == ["ID", "KIND", "CREATED", "EXPIRES", "REVOKED"]
    assert lines[1].split()[1:2] == ["signed"]


def test_list_shows_keys_without_the_key_material(mobile: ServerProcess) -> None:
    answer = issue(mobile)

    table = meshplane("keys", "list", "mobile", server=mobile)
    as_json = meshplane("keys", "list", "mobile", "-o", "json", server=mobile)

    assert table.returncode == 0, table.stderr
    header, *rows = [line.split() for line in table.stdout.strip().splitlines()]
    assert header == ["ID", "KIND", "CREATED", "EXPIRES", "REVOKED"]
    assert [answer["id"], "signed", answer["created"], "never", "no"] in rows
    for output in (table.stdout, as_json.stdout):
        assert answer["key"] not in output
    assert all("key" not in view for view in json.loads(as_json.stdout))


def test_revoke_marks_the_key_revoked(mobile: ServerProcess) -> None:
    answer = issue(mobile)

    result = meshplane("keys", "revoke", "mobile", answer["id"], server=mobile)

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"key {answer['id']} of mobile revoked"
    assert listed(mobile)[answer["id"]]["revoked"] is True


def test_rotate_prints_a_new_key_and_the_old_one_gets_an_expiry(mobile: ServerProcess) -> None:
    old = issue(mobile)

    result = meshplane("keys", "rotate", "mobile", old["id"], "--overlap", "1h", "-o", "json", server=mobile)

    assert result.returncode == 0, result.stderr
    fresh = json.loads(result.stdout)
    assert fresh["id"] != old["id"]
    assert fresh["key"].count(".") == 2 and fresh["key"] != old["key"]
    assert fresh["replaces"]["id"] == old["id"]
    keys = listed(mobile)
    assert keys[old["id"]]["expires"] == fresh["replaces"]["expires"]
    assert keys[fresh["id"]]["expires"] is None


def test_rotate_in_a_table_names_when_the_old_key_stops(mobile: ServerProcess) -> None:
    old = issue(mobile)

    result = meshplane("keys", "rotate", "mobile", old["id"], server=mobile)

    assert result.returncode == 0, result.stderr
    expires = listed(mobile)[old["id"]]["expires"]
    assert f"{old['id']} keeps working until {expires}" in result.stdout
    assert "not shown again" in result.stdout


def test_rotate_key_only_prints_just_the_new_key(mobile: ServerProcess) -> None:
    old = issue(mobile)

    result = meshplane("keys", "rotate", "mobile", old["id"], "--key-only", server=mobile)

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().count(".") == 2
    assert result.stdout.strip() != old["key"]


def test_a_key_imported_from_a_file_is_kept_as_opaque(mobile: ServerProcess, tmp_path: Path) -> None:
    key = f"legacy-{secrets.token_urlsafe(24)}"
    key_file = tmp_path / "legacy.key"
    key_file.write_text(key + "\n")

    answer = issue(mobile, "--import-key-file", str(key_file))

    assert (answer["kind"], answer["key"]) == ("opaque", key)
    assert listed(mobile)[answer["id"]]["kind"] == "opaque"


def test_a_missing_import_file_is_a_usage_error(mobile: ServerProcess, tmp_path: Path) -> None:
    result = meshplane("keys", "create", "mobile", "--import-key-file", str(tmp_path / "absent.key"), server=mobile)

    assert result.returncode == 2
    assert "absent.key" in result.stderr


def test_key_only_with_an_output_format_is_a_usage_error(mobile: ServerProcess) -> None:
    result = meshplane("keys", "create", "mobile", "--key-only", "-o", "json", server=mobile)

    assert result.returncode == 2
    assert "--key-only" in result.stderr


def test_an_unknown_application_fails_with_the_servers_message(server: ServerProcess) -> None:
    result = meshplane("keys", "create", "nobody", server=server)

    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "404" in result.stderr and "nobody" in result.stderr
    assert result.stdout == ""


def test_an_unknown_key_fails_with_the_servers_message(mobile: ServerProcess) -> None:
    result = meshplane("keys", "revoke", "mobile", "k-0000000000000000", server=mobile)

    assert result.returncode == 1
    assert "404" in result.stderr and "k-0000000000000000" in result.stderr


def test_a_bad_expiry_fails_with_the_field_path(mobile: ServerProcess) -> None:
    result = meshplane("keys", "create", "mobile", "--expires-in", "soon", server=mobile)

    assert result.returncode == 1
    assert "422" in result.stderr
    assert "expiresIn:" in result.stderr and "soon" in result.stderr


def rotate_signing_key(server: ServerProcess) -> str:
    """`signing-keys rotate`: the new signing key's id, as it printed it."""
    result = meshplane("signing-keys", "rotate", server=server)
    assert result.returncode == 0, result.stderr
    kid = result.stdout.split()[2]
    assert result.stdout.strip() == f"signing key {kid} now signs new API keys"
    return kid


def test_signing_key_rotate_prints_the_kid_that_signs_new_keys(mobile: ServerProcess) -> None:
    kid = rotate_signing_key(mobile)

    assert jwt.get_unverified_header(issue(mobile)["key"])["kid"] == kid


def test_a_replaced_signing_key_can_be_retired(server: ServerProcess) -> None:
    replaced = rotate_signing_key(server)
    rotate_signing_key(server)

    result = meshplane("signing-keys", "retire", replaced, server=server)

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"signing key {replaced} retired"


def test_retiring_an_unknown_signing_key_fails_with_the_servers_message(server: ServerProcess) -> None:
    result = meshplane("signing-keys", "retire", "no-such-kid", server=server)

    assert result.returncode == 1
    assert "404" in result.stderr and "no-such-kid" in result.stderr
