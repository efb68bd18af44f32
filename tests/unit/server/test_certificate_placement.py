"""A certificate goes where the Gateways naming it are placed, and leaves a cluster when they do."""

from __future__ import annotations

from meshplane.model.registry import REGISTRY
from meshplane.security.ca import create_ca, issue_server_certificate
from meshplane.server.projection import FleetProjection
from meshplane.xds.cache import ResourceCache
from tests.unit.server.test_projection import stored

CERT_TYPE = REGISTRY.get("TLSCertificate").type_url
PAIR = issue_server_certificate(create_ca(), ["shop.example.com"])


def certificate(name: str) -> object:
    spec = {"certificate": PAIR.certificate_pem().decode(), "privateKey": {"digest": "d", "ciphertext": "c"}}
    return stored("TLSCertificate", name, project="shop", spec=spec)


def gateway(name: str, clusters: list[str], refs: list[str]) -> object:
    listener = {"name": "https", "port": 10443, "protocol": "HTTPS", "tls": {"certificateRefs": refs}}
    return stored("Gateway", name, project="shop", spec={"listeners": [listener], "placement": {"clusters": clusters}})


def held(projection: FleetProjection, cluster: str) -> set[str]:
    return set(projection.cluster_resources(cluster)[CERT_TYPE])


def test_a_certificate_follows_the_gateways_that_name_it() -> None:
    projection = FleetProjection(ResourceCache(), lambda key, spec: spec)
    clusters = [stored("Cluster", name) for name in ("edge-1", "edge-2", "edge-3")]
    projection.reset([certificate("a"), certificate("b"), gateway("public", ["edge-1"], ["a"])], clusters)
    assert (held(projection, "edge-1"), held(projection, "edge-2")) == ({"shop/a"}, set())
    projection.upsert_object(gateway("inner", ["edge-2", "edge-3"], ["a", "b"]))
    assert [held(projection, c) for c in ("edge-1", "edge-2", "edge-3")] == [{"shop/a"}, *[{"shop/a", "shop/b"}] * 2]
    projection.upsert_object(gateway("inner", ["edge-3"], ["b"]))
    assert [held(projection, c) for c in ("edge-1", "edge-2", "edge-3")] == [{"shop/a"}, set(), {"shop/b"}]
    projection.remove_object(("Gateway", "shop", "public"))
    assert held(projection, "edge-1") == set()


def test_without_a_way_to_open_it_no_key_is_delivered() -> None:
    projection = FleetProjection(ResourceCache())
    projection.reset([certificate("a"), gateway("public", ["edge-1"], ["a"])], [stored("Cluster", "edge-1")])
    [packed] = projection.cluster_resources("edge-1")[CERT_TYPE].values()
    assert b"ciphertext" not in packed.body.value and b"digest" not in packed.body.value
