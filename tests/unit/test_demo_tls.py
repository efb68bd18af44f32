"""The demo's tour certificates: one CA verifies the shop's certificate and signs the client's, the keys are
the owner's only, and a second start keeps the files the store's TLSCertificate was made from."""

from __future__ import annotations

import stat
from pathlib import Path

from cryptography import x509

from meshplane.demo_tls import SHOP_HOST, ensure_demo_tls


def test_the_tour_certificates_are_made_once_and_kept(tmp_path: Path) -> None:
    first = ensure_demo_tls(tmp_path / "tls")
    written = {path: path.read_bytes() for path in first.files()}

    again = ensure_demo_tls(tmp_path / "tls")

    assert {path: path.read_bytes() for path in again.files()} == written
    assert stat.S_IMODE(first.shop_key.stat().st_mode) == 0o600
    assert stat.S_IMODE(first.client_key.stat().st_mode) == 0o600


def test_one_ca_vouches_for_the_shop_and_the_client(tmp_path: Path) -> None:
    tls = ensure_demo_tls(tmp_path / "tls")
    ca = x509.load_pem_x509_certificate(tls.ca.read_bytes())
    shop = x509.load_pem_x509_certificate(tls.shop_certificate.read_bytes())
    client = x509.load_pem_x509_certificate(tls.client_certificate.read_bytes())

    assert SHOP_HOST in shop.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName
    )
    shop.verify_directly_issued_by(ca)
    client.verify_directly_issued_by(ca)


def test_an_incomplete_set_is_made_anew(tmp_path: Path) -> None:
    first = ensure_demo_tls(tmp_path / "tls")
    before = first.ca.read_bytes()
    first.client_key.unlink()

    again = ensure_demo_tls(tmp_path / "tls")

    assert again.client_key.exists() and again.ca.read_bytes() != before
