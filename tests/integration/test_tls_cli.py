"""`meshplane tls create`: a TLSCertificate from PEM files on disk, the key stored and never shown again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from meshplane.security.ca import KeyPair, create_ca, issue_server_certificate
from meshplane_testing.cli import meshplane
from meshplane_testing.meshplane import ServerProcess

pytestmark = pytest.mark.timeout(60)


def pem_files(directory: Path, name: str, pair: KeyPair) -> tuple[str, str]:
    certificate, key = directory / f"{name}.crt", directory / f"{name}.key"
    certificate.write_bytes(pair.certificate_pem())
    key.write_bytes(pair.key_pem())
    return str(certificate), str(key)


def test_tls_create_stores_the_pair_and_no_read_shows_the_key(server: ServerProcess, tmp_path: Path) -> None:
    pair = issue_server_certificate(create_ca(), ["shop.example.com"])
    certificate, key = pem_files(tmp_path, "shop", pair)
    key_body = pair.key_pem().decode().splitlines()[1]

    created = meshplane("tls", "create", "cli-shop", "--cert", certificate, "--key", key, server=server)
    again = meshplane("tls", "create", "cli-shop", "--cert", certificate, "--key", key, server=server)
    read = meshplane("get", "tlscertificate", "cli-shop", "-o", "json", server=server)

    assert created.stdout.strip() == "tlscertificates/cli-shop -p default created", created.stderr
    assert again.stdout.strip() == "tlscertificates/cli-shop -p default configured", again.stderr
    stored = json.loads(read.stdout)
    assert stored["spec"]["certificate"] == pair.certificate_pem().decode()
    assert key_body not in created.stdout + again.stdout + read.stdout


def test_tls_create_of_a_key_that_is_not_the_certificates_names_the_field(
    server: ServerProcess, tmp_path: Path
) -> None:
    ca = create_ca()
    certificate, _ = pem_files(tmp_path, "shop", issue_server_certificate(ca, ["shop.example.com"]))
    _, other_key = pem_files(tmp_path, "other", issue_server_certificate(ca, ["other.example.com"]))

    result = meshplane("tls", "create", "cli-mismatch", "--cert", certificate, "--key", other_key, server=server)
    missing = meshplane("get", "tlscertificate", "cli-mismatch", server=server)

    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "spec.privateKey" in result.stderr and "does not match" in result.stderr, result.stderr
    assert missing.returncode == 1, missing.stdout


def test_tls_create_of_a_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    result = meshplane(
        "tls", "create", "x", "--cert", str(tmp_path / "none.crt"), "--key", str(tmp_path / "none.key"), server=None
    )

    assert result.returncode == 2 and "does not exist" in result.stderr, result.stderr
