"""The sealer: what it stores opens only with its data key and only in the object it was sealed for."""

from __future__ import annotations

from pathlib import Path

import pytest

from meshplane.model.gateways import TLSCertificateSpec
from meshplane.model.resource import InvalidObject
from meshplane.security.ca import create_ca, issue_server_certificate
from meshplane.server.sealing import STORED, FileDataKey, Sealer, UnreadableSealedValue, data_key_of

PAIR = issue_server_certificate(create_ca(), ["shop.example.com"])
KEY = ("TLSCertificate", "shop", "shop-cert")


def written() -> TLSCertificateSpec:
    return TLSCertificateSpec.model_validate(
        {"certificate": PAIR.certificate_pem().decode(), "privateKey": PAIR.key_pem().decode()}
    )


def stored_again(spec: TLSCertificateSpec) -> TLSCertificateSpec:
    """As the store gives it back: digest and ciphertext."""
    return TLSCertificateSpec.model_validate(spec.to_wire(STORED))


def test_a_sealed_value_opens_as_written_and_is_stored_encrypted(tmp_path: Path) -> None:
    sealer = Sealer(FileDataKey(tmp_path / "data-key"))
    sealed = sealer.seal(KEY, written())
    assert PAIR.key_pem().decode() not in str(sealed.to_wire(STORED))
    assert sealer.open(KEY, stored_again(sealed)).private_key.plaintext == PAIR.key_pem().decode()


def test_a_ciphertext_copied_into_another_object_does_not_open(tmp_path: Path) -> None:
    sealer = Sealer(FileDataKey(tmp_path / "data-key"))
    sealed = stored_again(sealer.seal(KEY, written()))
    with pytest.raises(UnreadableSealedValue):
        sealer.open(("TLSCertificate", "bank", "shop-cert"), sealed)


def test_another_data_key_opens_nothing_and_digests_differ(tmp_path: Path) -> None:
    one, other = Sealer(FileDataKey(tmp_path / "one")), Sealer(FileDataKey(tmp_path / "other"))
    sealed = stored_again(one.seal(KEY, written()))
    with pytest.raises(UnreadableSealedValue):
        other.open(KEY, sealed)
    assert sealed.private_key.digest != other.seal(KEY, written()).private_key.digest


def test_a_digest_given_back_keeps_only_a_value_stored(tmp_path: Path) -> None:
    sealer = Sealer(FileDataKey(tmp_path / "data-key"))
    stored = stored_again(sealer.seal(KEY, written()))
    shown = TLSCertificateSpec.model_validate(stored.to_wire())
    kept = sealer.seal(KEY, shown, previous=stored)
    assert sealer.open(KEY, stored_again(kept)).private_key.plaintext == PAIR.key_pem().decode()
    with pytest.raises(InvalidObject) as refused:
        sealer.seal(KEY, shown, previous=None)
    assert [error.path for error in refused.value.errors] == ["spec.privateKey"]


def test_the_data_key_is_made_private_or_must_be_there_when_given(tmp_path: Path) -> None:
    data_key_of(None, tmp_path)
    assert (tmp_path / "sealing" / "data-key").stat().st_mode & 0o077 == 0
    with pytest.raises(FileNotFoundError):
        data_key_of(tmp_path / "absent", tmp_path)
    (tmp_path / "short").write_bytes(b"x" * 16)
    with pytest.raises(ValueError, match="32-byte"):
        data_key_of(tmp_path / "short", tmp_path)
