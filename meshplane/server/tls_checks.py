"""What a certificate written now must be, beyond its shape: valid now (a model cannot know the time)."""

from __future__ import annotations

from datetime import UTC, datetime

from cryptography import x509

from meshplane.model.gateways import TLSCertificateSpec
from meshplane.model.resource import FieldError, InvalidObject, Resource


def check_certificate_dates(resource: Resource, now: datetime | None = None) -> None:
    """InvalidObject (422 on spec.certificate) for a certificate that has expired or is not valid yet."""
    spec = resource.spec
    if not isinstance(spec, TLSCertificateSpec) or spec.certificate is None:
        return
    now = now or datetime.now(UTC)
    leaf = x509.load_pem_x509_certificates(spec.certificate.encode())[0]
    if leaf.not_valid_after_utc <= now:
        message = f"expired on {leaf.not_valid_after_utc.isoformat()}"
    elif leaf.not_valid_before_utc > now:
        message = f"is not valid before {leaf.not_valid_before_utc.isoformat()}"
    else:
        return
    raise InvalidObject([FieldError(path="spec.certificate", message=message)])
