"""PEM text in specs: certificate chains and CA bundles, checked when written."""

from __future__ import annotations

from typing import Annotated

from cryptography import x509
from pydantic import AfterValidator


def _check_certificates(value: str) -> str:
    try:
        certificates = x509.load_pem_x509_certificates(value.encode())
    except ValueError:
        raise ValueError("is not a PEM certificate chain") from None
    if not certificates:
        raise ValueError("holds no certificate")
    return value


PemCertificates = Annotated[str, AfterValidator(_check_certificates)]
