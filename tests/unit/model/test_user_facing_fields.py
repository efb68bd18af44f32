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


def _ingress(**spec: Any) -> dict[str, Any]:
    base = {
        "hosts": ["shop.example.com"],
        "entities": [{"name": "public", "tls": {"mode": "SIMPLE", "credentialName": "shop-cert"}}],
        "routes": [{"match": {"prefix": "/"}, "to": {"service": "web", "port": 8443}}],
    }
    return {"kind": "IngressIntent", "metadata": {"name": "shop", "project": "shop"}, "spec": {**base, **spec}}


def test_a_deny_by_principal_or_claim_is_refused_with_a_passthrough_entity() -> None:
    """Istio drops HTTP-only fields from a DENY on a TCP chain: the rule would deny every connection."""
    entities = [{"name": "legacy", "tls": {"mode": "PASSTHROUGH"}}]
    access = [
        {"action": "DENY", "sources": {"ipBlocks": ["192.0.2.0/24"]}},
        {"action": "DENY", "sources": {"requestPrincipals": ["https://idp.example.com/banned"]}},
        {"action": "DENY", "jwtClaims": {"groups": "banned"}},
        {"action": "ALLOW", "sources": {"requestPrincipals": ["https://idp.example.com/*"]}},
    ]
    authentication = {"jwt": [{"issuer": "https://idp.example.com", "jwksUri": "https://idp.example.com/keys"}]}
    refused = _refused(_ingress(entities=entities, access=access, authentication=authentication))
    assert [path for path, _ in refused] == ["spec.access[1]", "spec.access[2]"]
    assert "PASSTHROUGH" in refused[0][1]
    assert REGISTRY.parse(_ingress(access=access, authentication=authentication))


def test_a_bare_wildcard_user_facing_host_is_refused() -> None:
    [(path, message)] = _refused(_ingress(hosts=["shop.example.com", "*"]))
    assert path == "spec.hosts[1]" and "every host" in message
    assert REGISTRY.parse(_ingress(hosts=["*.shop.example.com"]))


@pytest.mark.parametrize("credential", ["shop/shop-cert", "kubernetes://shop-cert", "Shop_Cert"])
def test_a_credential_name_is_a_bare_secret_name_in_the_gateways_namespace(credential: str) -> None:
    """istiod serves a gateway only Secrets of the gateway's own namespace (istio-system), by bare name."""
    entities = [{"name": "public", "tls": {"mode": "SIMPLE", "credentialName": credential}}]
    [(path, message)] = _refused(_ingress(entities=entities))
    assert path == "spec.entities[0].tls.credentialName" and "istio-system" in message


def test_the_credential_name_says_where_the_secret_lives_in_the_schema() -> None:
    from meshplane.model.intents import EntityTls

    description = EntityTls.model_json_schema(by_alias=True)["properties"]["credentialName"]["description"]
    assert "istio-system" in description and "not the intent's namespace" in description
