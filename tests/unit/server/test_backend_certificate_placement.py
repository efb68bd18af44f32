"""A client certificate a backend presents goes where its API is placed, and nowhere else."""

from __future__ import annotations

from meshplane.server.projection import FleetProjection
from meshplane.xds.cache import ResourceCache
from tests.unit.server.test_certificate_placement import certificate, held
from tests.unit.server.test_projection import stored


def api(name: str, clusters: list[str], ref: str) -> object:
    backend = {"host": "10.0.0.1", "port": 443, "tls": {"sni": "orders.internal", "clientCertificateRef": ref}}
    spec = {"basePath": f"/{name}", "backends": [backend], "placement": {"clusters": clusters}}
    return stored("API", name, project="shop", spec=spec)


def test_a_certificate_follows_the_apis_whose_backends_present_it() -> None:
    projection = FleetProjection(ResourceCache(), lambda key, spec: spec)
    clusters = [stored("Cluster", name) for name in ("edge-1", "edge-2")]
    projection.reset([certificate("client"), certificate("other"), api("orders", ["edge-1"], "client")], clusters)
    assert (held(projection, "edge-1"), held(projection, "edge-2")) == ({"shop/client"}, set())

    projection.upsert_object(api("orders", ["edge-2"], "client"))
    assert (held(projection, "edge-1"), held(projection, "edge-2")) == (set(), {"shop/client"})
    projection.remove_object(("API", "shop", "orders"))
    assert held(projection, "edge-2") == set()
