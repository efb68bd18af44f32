"""A user-facing host at its DNS zone's apex can only have A / AAAA records: a CNAME there is dropped by the
DNS server (the zone's SOA and NS records are at the apex) and sent again by external-dns forever."""

from __future__ import annotations

from typing import Any

from meshplane.model.resource import Resource
from meshplane.server.intent_checks import apex_cnames
from meshplane_testing.resources import resource, stored


def cluster(name: str, addresses: list[str] | None) -> Any:
    spec = {"ingressGateway": {"addresses": addresses}} if addresses else {}
    return stored(resource("Cluster", name, spec))


def storefront(hosts: list[str], zone: str = "example.com") -> Resource:
    spec = {
        "hosts": hosts,
        "dns": [{"server": "public-dns", "zone": zone}],
        "entities": [{"name": "public", "tls": {"mode": "SIMPLE", "credentialName": "shop-cert"}}],
        "routes": [{"match": {"prefix": "/"}, "to": {"service": "orders", "port": 8080}}],
        "placement": {"logicalCloud": "retail"},
    }
    return resource("IngressIntent", "storefront", spec)


RETAIL = stored(resource("LogicalCloud", "retail", {"clusters": [{"name": "edge-1", "namespace": "shop"}]}))


def test_a_zone_apex_served_only_by_hostname_addresses_is_refused_with_its_host_and_zone() -> None:
    clusters = [cluster("edge-1", ["lb-1.cloud.test"]), cluster("edge-2", ["203.0.113.12"])]
    intent = storefront(["www.example.com", "example.com"], zone="example.com.")
    [error] = apex_cnames(intent, clusters, [RETAIL])
    assert error.path == "spec.hosts[1]"
    assert "example.com is the apex of zone example.com. on DNS server public-dns" in error.message
    assert "CNAME" in error.message and "IP address" in error.message


def test_a_zone_apex_with_an_ip_address_or_with_no_address_yet_is_accepted() -> None:
    apex = storefront(["example.com"])
    assert apex_cnames(apex, [cluster("edge-1", ["lb-1.cloud.test", "203.0.113.11"])], [RETAIL]) == []
    assert apex_cnames(apex, [cluster("edge-1", None)], [RETAIL]) == []
    below = storefront(["shop.example.com", "*.example.com"])
    assert apex_cnames(below, [cluster("edge-1", ["lb-1.cloud.test"])], [RETAIL]) == []
