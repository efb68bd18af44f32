"""Gateways and their certificates: the listeners (port, protocol, hostnames, TLS) APIs are served on."""

from __future__ import annotations

from enum import StrEnum

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from pydantic import Field, field_validator, model_validator

from meshplane.model.base import WireModel
from meshplane.model.kinds import Hostname, Port
from meshplane.model.meta import Name, Placement
from meshplane.model.pem import PemCertificates
from meshplane.model.sealed import SealedValue


def check_private_key(value: str) -> str:
    """A PEM private key, unencrypted (the gateway has no passphrase to open it with)."""
    try:
        serialization.load_pem_private_key(value.encode(), password=None)
    except (ValueError, TypeError):
        raise ValueError("is not an unencrypted PEM private key") from None
    return value


def key_matches(certificates: str, private_key: str) -> bool:
    """Whether the key is the one of the chain's leaf (its public half is the certificate's)."""
    leaf = x509.load_pem_x509_certificates(certificates.encode())[0]
    key = serialization.load_pem_private_key(private_key.encode(), password=None)
    der = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    return key.public_key().public_bytes(*der) == leaf.public_key().public_bytes(*der)


class SecretRef(WireModel):
    """A Secret of type kubernetes.io/tls in the data-plane cluster, which its agent reads."""

    name: Name
    namespace: Name


class TLSCertificateSpec(WireModel):
    """A certificate chain and its private key, given here (the key write-only) or in a cluster's Secret."""

    certificate: PemCertificates | None = None
    """The PEM chain, leaf first."""
    private_key: SealedValue | None = None
    secret_ref: SecretRef | None = None

    @field_validator("private_key")
    @classmethod
    def _key_is_pem(cls, value: SealedValue | None) -> SealedValue | None:
        if value is not None and value.plaintext is not None:
            check_private_key(value.plaintext)
        return value

    def field_problems(self) -> list[tuple[str, str]]:
        if self.secret_ref is not None:
            taken = [
                name for name, value in (("certificate", self.certificate), ("privateKey", self.private_key)) if value
            ]
            return [(name, "give secretRef, or certificate and privateKey, not both") for name in taken]
        problems = []
        if self.certificate is None:
            problems.append(("certificate", "is required (or secretRef)"))
        if self.private_key is None:
            problems.append(("privateKey", "is required (or secretRef)"))
        elif (
            self.certificate is not None
            and self.private_key.plaintext is not None
            and not key_matches(self.certificate, self.private_key.plaintext)
        ):
            problems.append(("privateKey", "does not match the certificate (the chain's first one)"))
        return problems


class ListenerProtocol(StrEnum):
    HTTP = "HTTP"
    HTTPS = "HTTPS"


class ClientValidationMode(StrEnum):
    REQUIRED = "Required"
    """A client without a certificate signed by these CAs is refused in the handshake."""
    OPTIONAL = "Optional"
    """A client may present no certificate; one it presents must be signed by these CAs."""


class ClientValidation(WireModel):
    ca_certificates: PemCertificates
    mode: ClientValidationMode = ClientValidationMode.REQUIRED


class ListenerTLS(WireModel):
    certificate_refs: list[Name] = Field(min_length=1)
    """TLSCertificates of the Gateway's project; each hostname is served the one whose names cover it."""
    client_validation: ClientValidation | None = None


class GatewayListener(WireModel):
    name: Name
    port: Port
    protocol: ListenerProtocol = ListenerProtocol.HTTP
    hostnames: list[Hostname] = Field(default_factory=lambda: ["*"], min_length=1)
    tls: ListenerTLS | None = None

    @model_validator(mode="after")
    def _tls_matches_protocol(self) -> GatewayListener:
        if self.protocol is ListenerProtocol.HTTPS and self.tls is None:
            raise ValueError("an HTTPS listener needs tls.certificateRefs")
        if self.protocol is ListenerProtocol.HTTP and self.tls is not None:
            raise ValueError("an HTTP listener takes no tls")
        return self


class GatewaySpec(WireModel):
    """Where a cluster's gateway listens for the APIs that name this Gateway; placed like an API."""

    listeners: list[GatewayListener] = Field(min_length=1)
    placement: Placement = Field(default_factory=Placement)

    def field_problems(self) -> list[tuple[str, str]]:
        problems: list[tuple[str, str]] = []
        names: set[str] = set()
        on_port: dict[int, list[tuple[int, GatewayListener]]] = {}
        for index, listener in enumerate(self.listeners):
            if listener.name in names:
                problems.append((f"listeners[{index}].name", f"{listener.name!r} is declared twice"))
            names.add(listener.name)
            for other_index, other in on_port.get(listener.port, []):
                problems.extend(_clash(index, listener, other_index, other))
            on_port.setdefault(listener.port, []).append((index, listener))
        return problems

    def certificate_refs(self) -> set[str]:
        return {ref for listener in self.listeners if listener.tls for ref in listener.tls.certificate_refs}


def _clash(index: int, listener: GatewayListener, other_index: int, other: GatewayListener) -> list[tuple[str, str]]:
    """Two listeners on one port share it when they speak one protocol and serve no hostname alike."""
    if listener.protocol is not other.protocol:
        message = f"port {listener.port} is already {other.protocol.value} (listeners[{other_index}])"
        return [(f"listeners[{index}].protocol", message)]
    if listener.protocol is ListenerProtocol.HTTP:
        return [(f"listeners[{index}].port", f"port {listener.port} is already listeners[{other_index}]'s")]
    if shared := sorted(set(listener.hostnames) & set(other.hostnames)):
        message = f"{', '.join(shared)} already served on port {listener.port} by listeners[{other_index}]"
        return [(f"listeners[{index}].hostnames", message)]
    return []
