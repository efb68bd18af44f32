"""`meshplane render`: what one cluster would receive, computed from YAML files with no server.

The same functions the server uses (placement, rendering) on objects read from files; Cluster objects
in the files give the fleet its labels, east-west gateways and ingress addresses.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from meshplane.model.manifests import DELIVERED_TYPE_URLS
from meshplane.model.registry import REGISTRY, Feed
from meshplane.model.resource import Resource
from meshplane.server.manifests import RENDERED_FROM, render_fleet
from meshplane.server.projection import placement_of
from meshplane.server.render.cluster import render_cluster
from meshplane.server.render.fleet import cluster_info
from meshplane.server.render.names import DEFAULT_TRUST_DOMAIN


def project_documents(
    docs: Iterable[dict[str, Any]], cluster: str, trust_domain: str = DEFAULT_TRUST_DOMAIN
) -> list[dict[str, Any]]:
    """Delivered objects placed on `cluster`, then the manifests rendered for it; ValueError for a
    cluster the files do not define (InvalidObject for an invalid document)."""
    resources = [REGISTRY.parse(doc) for doc in docs]
    clusters = {
        r.metadata.name: cluster_info(r.metadata.name, r.metadata.labels, r.spec)  # type: ignore[arg-type]
        for r in resources
        if Feed.FLEET in REGISTRY.get(r.kind).feeds
    }
    if cluster not in clusters:
        raise ValueError(f"cluster {cluster!r} is not defined in the files (add a Cluster object)")
    labels = dict(clusters[cluster].labels)
    delivered_kinds = {info.kind for info in REGISTRY.delivered() if info.type_url in DELIVERED_TYPE_URLS}
    placed = sorted(
        (r for r in resources if r.kind in delivered_kinds and placement_of(r).selects(cluster, labels)),
        key=lambda r: (r.kind, r.metadata.project or "", r.metadata.name),
    )
    fleet = render_fleet(clusters.values(), _rendered_from(resources), trust_domain)
    return [_without_status(r) for r in placed] + render_cluster(fleet, cluster)


def _rendered_from(resources: list[Resource]) -> list[Resource]:
    return [r for r in resources if r.kind in RENDERED_FROM]


def _without_status(resource: Resource) -> dict[str, Any]:
    wire = resource.to_wire()
    wire.pop("status", None)
    return wire
