"""Ask an istiod's CA for a workload certificate, as pilot-agent does: a CSR and a ServiceAccount token over TLS.

The two messages of `istio.v1.auth.IstioCertificateService/CreateCertificate` are small enough to write
by hand (request: `csr` = 1, `validity_duration` = 3; response: repeated `cert_chain` = 1), so the
harness needs none of Istio's generated code.
"""

from __future__ import annotations

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

_METHOD = "/istio.v1.auth.IstioCertificateService/CreateCertificate"


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _request(csr_pem: bytes, validity_seconds: int) -> bytes:
    return b"\x0a" + _varint(len(csr_pem)) + csr_pem + b"\x18" + _varint(validity_seconds)


def _cert_chain(message: bytes) -> list[str]:
    """Field 1 (length-delimited, repeated) of a response; any other field is skipped."""
    chain, position = [], 0
    while position < len(message):
        key, position = _read_varint(message, position)
        field, wire_type = key >> 3, key & 7
        if wire_type == 0:
            _, position = _read_varint(message, position)
            continue
        if wire_type != 2:
            raise ValueError(f"unexpected wire type {wire_type} in a CreateCertificate response")
        length, position = _read_varint(message, position)
        if field == 1:
            chain.append(message[position : position + length].decode())
        position += length
    return chain


def _read_varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, position


def request_workload_certificate(
    address: str,
    root_pem: bytes,
    server_name: str,
    token: str,
    cluster_id: str,
    spiffe_id: str,
    validity_seconds: int = 3600,
) -> list[x509.Certificate]:
    """The chain istiod at `address` issues for `spiffe_id`, leaf first (its last element is the root)."""
    key = ec.generate_private_key(ec.SECP256R1())
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([]))
        .add_extension(x509.SubjectAlternativeName([x509.UniformResourceIdentifier(spiffe_id)]), critical=True)
        .sign(key, hashes.SHA256())
    )
    credentials = grpc.ssl_channel_credentials(root_certificates=root_pem)
    options = [("grpc.ssl_target_name_override", server_name)]
    with grpc.secure_channel(address, credentials, options=options) as channel:
        create = channel.unary_unary(_METHOD, request_serializer=None, response_deserializer=None)
        response = create(
            _request(csr.public_bytes(serialization.Encoding.PEM), validity_seconds),
            metadata=[("authorization", f"Bearer {token}"), ("clusterid", cluster_id)],
            timeout=10,
        )
    return [
        certificate for pem in _cert_chain(response) for certificate in x509.load_pem_x509_certificates(pem.encode())
    ]
