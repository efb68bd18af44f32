"""The render input takes a cluster's ingress addresses from its agent's report of the ingress gateway Service
where the Cluster declares none, and only from that cluster's own report."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from meshplane.model.meta import cluster_origin
from meshplane.model.stored import StoredObject
from meshplane.server.manifests import ManifestProjection
from meshplane.xds.cache import ResourceCache

NOW = datetime.now(UTC)


def stored(kind: str, name: str, spec: dict[str, Any], origin: str | None = None, project: str = "") -> StoredObject:
    return StoredObject(kind, project, name, "uid", 1, 1, origin, {}, {}, spec, {}, NOW, NOW, False)


def gateway_endpoint(cluster: str, addresses: list[str], origin: str | None, name: str = "gateway") -> StoredObject:
    spec = {"cluster": cluster, "namespace": "istio-system", "service": "istio-ingressgateway"}
    return stored(
        "ServiceEndpoint",
        f"{cluster}-{name}",
        {**spec, "loadBalancer": addresses},
        origin,
        project="default",
    )


def ingress_of(projection: ManifestProjection) -> dict[str, tuple[str, ...]]:
    return {info.name: info.ingress_addresses for info in projection.cluster_infos()}


def test_a_cluster_declaring_no_ingress_addresses_gets_those_its_agent_reported() -> None:
    projection = ManifestProjection(ResourceCache())
    projection.upsert(stored("Cluster", "edge-1", {}))
    projection.upsert(stored("Cluster", "edge-2", {"ingressGateway": {"addresses": ["203.0.113.12"]}}))
    projection.upsert(gateway_endpoint("edge-1", ["198.51.100.7", "lb.example.net"], cluster_origin("edge-1")))
    projection.upsert(gateway_endpoint("edge-2", ["198.51.100.8"], cluster_origin("edge-2")))
    assert ingress_of(projection) == {"edge-1": ("198.51.100.7", "lb.example.net"), "edge-2": ("203.0.113.12",)}

    projection.remove(gateway_endpoint("edge-1", [], cluster_origin("edge-1")).key)
    assert ingress_of(projection)["edge-1"] == ()


def test_a_report_speaks_only_for_the_cluster_that_made_it() -> None:
    projection = ManifestProjection(ResourceCache())
    projection.upsert(stored("Cluster", "edge-1", {}))
    projection.upsert(gateway_endpoint("edge-1", ["198.51.100.66"], cluster_origin("edge-2"), name="forged"))
    projection.upsert(gateway_endpoint("edge-1", ["198.51.100.67"], None, name="unowned"))
    assert ingress_of(projection) == {"edge-1": ()}


def test_an_unrelated_service_report_renders_nothing_again() -> None:
    projection = ManifestProjection(ResourceCache())
    projection.upsert(stored("Cluster", "edge-1", {}))
    projection.flush()
    orders = {"cluster": "edge-1", "namespace": "shop", "service": "orders", "loadBalancer": ["198.51.100.9"]}
    projection.upsert(stored("ServiceEndpoint", "orders", orders, cluster_origin("edge-1"), project="shop"))
    assert not projection._stale
    assert ingress_of(projection) == {"edge-1": ()}
