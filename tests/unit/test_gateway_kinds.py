"""TLSCertificate and Gateway: what a write is refused for, each at its field's path."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from meshplane.model.registry import REGISTRY
from meshplane.model.resource import InvalidObject
from meshplane.security.ca import create_ca, issue_server_certificate
from meshplane.server.tls_checks import check_certificate_dates
from meshplane_testing import documents

CA = create_ca()
LEAF = issue_server_certificate(CA, ["shop.example.com"])
OTHER = issue_server_certificate(CA, ["bank.example.com"])
CERT, KEY = LEAF.certificate_pem().decode(), LEAF.key_pem().decode()


def certificate(**spec: Any) -> dict[str, Any]:
    return documents.document("TLSCertificate", "shop-cert", spec=spec)


def https(name: str = "https", port: int = 10443, hostnames: list[str] | None = None, **more: Any) -> dict[str, Any]:
    tls = {"certificateRefs": ["shop-cert"]}
    return {"name": name, "port": port, "protocol": "HTTPS", "hostnames": hostnames or ["*"], "tls": tls, **more}


def gateway(*listeners: dict[str, Any]) -> dict[str, Any]:
    return documents.document("Gateway", "public", spec={"listeners": list(listeners)})


def paths(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(InvalidObject) as refused:
        REGISTRY.parse(doc)
    return [error.path for error in refused.value.errors]


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        pytest.param(certificate(certificate=CERT, privateKey=OTHER.key_pem().decode()), ["spec.privateKey"], id="key"),
        pytest.param(certificate(certificate="-----BEGIN CERTIFICATE-----\nAAAA\n", privateKey=KEY), None, id="pem"),
        pytest.param(certificate(certificate=CERT, privateKey="not a key"), ["spec.privateKey"], id="bad-key"),
        pytest.param(certificate(certificate=CERT), ["spec.privateKey"], id="no-key"),
        pytest.param(
            certificate(certificate=CERT, privateKey=KEY, secretRef={"name": "tls", "namespace": "edge"}),
            ["spec.certificate", "spec.privateKey"],
            id="both",
        ),
        pytest.param(gateway({"name": "web", "port": 10443, "protocol": "HTTPS"}), ["spec.listeners[0]"], id="no-tls"),
        pytest.param(
            gateway({"name": "web", "port": 10080, "tls": {"certificateRefs": ["c"]}}), ["spec.listeners[0]"], id="http"
        ),
        pytest.param(
            gateway(https(hostnames=["a.example.com"]), https("two", hostnames=["a.example.com", "b.example.com"])),
            ["spec.listeners[1].hostnames"],
            id="hostname-clash",
        ),
        pytest.param(gateway(https(), {"name": "web", "port": 10443}), ["spec.listeners[1].protocol"], id="protocols"),
        pytest.param(gateway(https(), https()), ["spec.listeners[1].name", "spec.listeners[1].hostnames"], id="twice"),
        pytest.param(
            gateway(https(tls={"certificateRefs": ["c"], "clientValidation": {"caCertificates": "x"}})),
            ["spec.listeners[0].tls.clientValidation.caCertificates"],
            id="client-ca",
        ),
    ],
)
def test_an_invalid_gateway_object_is_refused_at_its_field(doc: dict[str, Any], expected: list[str] | None) -> None:
    found = paths(doc)
    assert found == expected if expected is not None else found and found[0] == "spec.certificate"


def test_two_https_listeners_share_a_port_by_hostname() -> None:
    doc = gateway(https(hostnames=["a.example.com"]), https("two", hostnames=["b.example.com"]))
    assert len(REGISTRY.parse(doc).spec.listeners) == 2


def test_a_certificate_that_expired_is_refused() -> None:
    old = issue_server_certificate(CA, ["old.example.com"], now=datetime.now(UTC) - timedelta(days=800))
    resource = REGISTRY.parse(
        certificate(certificate=old.certificate_pem().decode(), privateKey=old.key_pem().decode())
    )
    with pytest.raises(InvalidObject) as refused:
        check_certificate_dates(resource)
    assert [(e.path, e.message.split()[0]) for e in refused.value.errors] == [("spec.certificate", "expired")]
    check_certificate_dates(REGISTRY.parse(certificate(certificate=CERT, privateKey=KEY)))


def test_a_read_shows_that_the_key_is_set_never_the_key() -> None:
    wire = REGISTRY.parse(certificate(certificate=CERT, privateKey=KEY)).to_wire()
    assert wire["spec"]["privateKey"] == {"set": True}
    assert KEY not in str(wire)
