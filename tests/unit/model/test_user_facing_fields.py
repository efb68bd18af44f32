"""The fields user-facing traffic depends on: a cluster's ingress addresses and an IngressIntent's TLS."""

from __future__ import annotations

from typing import Any

import pytest

from meshplane.model.registry import REGISTRY
from meshplane.model.resource import InvalidObject


def _cluster(spec: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "Cluster", "metadata": {"name": "edge-1"}, "spec": spec}


def _refused(doc: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(InvalidObject) as caught:
        REGISTRY.parse(doc)
    return [(error.path, error.message) for error in caught.value.errors]


def test_a_cluster_declares_its_ingress_addresses_as_ip_addresses_or_hostnames() -> None:
    addresses = ["203.0.113.11", "2001:db8::11", "lb-1.example.net"]
    cluster = REGISTRY.parse(_cluster({"ingressGateway": {"addresses": addresses}}))
    assert cluster.spec.ingress_gateway.addresses == addresses


@pytest.mark.parametrize("address", ["*.example.net", "not an address", "203.0.113.300/24"])
def test_an_ingress_address_that_is_neither_an_ip_nor_a_hostname_is_refused(address: str) -> None:
    [(path, message)] = _refused(_cluster({"ingressGateway": {"addresses": [address]}}))
    assert path == "spec.ingressGateway.addresses[0]" and "neither an IP address nor a hostname" in message


def test_an_ingress_gateway_without_addresses_is_refused() -> None:
    [(path, _)] = _refused(_cluster({"ingressGateway": {"addresses": []}}))
    assert path == "spec.ingressGateway.addresses"
