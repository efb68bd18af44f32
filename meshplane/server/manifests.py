"""Rendered intents per cluster, kept in the xDS cache beside the delivered objects.

Intents, logical clouds and clusters feed one pure render per cluster; it runs once per batch of
changes, and since versions are content hashes, a cluster whose rendering did not change is not
pushed anything.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from meshplane.model.kinds import ClusterSpec
from meshplane.model.manifests import MANIFEST_TYPE, manifest_name, to_manifest
from meshplane.model.meta import origin_cluster
from meshplane.model.registry import REGISTRY, Feed
from meshplane.model.resource import Resource
from meshplane.model.stored import ObjectKey, StoredObject, to_resource
from meshplane.observability.logging import get_logger
from meshplane.server.render.cluster import render_cluster
from meshplane.server.render.fleet import INGRESS_GATEWAY_SERVICE, ClusterInfo, Fleet, cluster_info
from meshplane.server.render.names import DEFAULT_TRUST_DOMAIN
from meshplane.xds.cache import ResourceCache
from meshplane.xds.resource import VersionedResource, pack

log = get_logger("meshplane.server.manifests")

REPORTED_KIND = "ServiceEndpoint"
"""Feeds the manifests with what clusters report of themselves, not as an intent: see `reported_ingress`."""
RENDERED_FROM = tuple(kind for kind in REGISTRY.kinds_feeding(Feed.MANIFESTS) if kind != REPORTED_KIND)
"""The kinds rendered into manifests (clusters are what they are rendered for)."""


def stored_cluster_info(stored: StoredObject) -> ClusterInfo:
    return cluster_info(stored.name, stored.labels, ClusterSpec.model_validate(stored.spec))


def reported_ingress(stored: StoredObject) -> tuple[str, tuple[str, ...]] | None:
    """(cluster, its ingress gateway's load balancer addresses) when `stored` is the ingress gateway Service a
    cluster reported of itself; None for every other endpoint, and for one whose origin is not its cluster's
    (a cluster's report speaks for that cluster only)."""
    spec = stored.spec
    if (spec.get("namespace"), spec.get("service")) != INGRESS_GATEWAY_SERVICE:
        return None
    cluster = spec.get("cluster")
    if not cluster or origin_cluster(stored.origin) != cluster:
        return None
    return cluster, tuple(spec.get("loadBalancer") or ())


def render_fleet(
    clusters: Iterable[ClusterInfo], sources: Iterable[Resource], trust_domain: str = DEFAULT_TRUST_DOMAIN
) -> Fleet:
    """The render input from clusters and validated LogicalCloud / intent resources."""
    by_kind: dict[str, list[Resource]] = {kind: [] for kind in RENDERED_FROM}
    for resource in sources:
        by_kind[resource.kind].append(resource)
    return Fleet(
        clusters={c.name: c for c in clusters},
        logical_clouds={(r.metadata.project or "", r.metadata.name): r.spec for r in by_kind["LogicalCloud"]},
        service_intents=by_kind["ServiceIntent"],
        egress_intents=by_kind["EgressIntent"],
        ingress_intents=by_kind["IngressIntent"],
        trust_domain=trust_domain,
    )


def packed_manifests(objects: Iterable[dict]) -> dict[str, VersionedResource]:
    return {manifest_name(obj): pack(manifest_name(obj), to_manifest(obj)) for obj in objects}


class ManifestProjection:
    def __init__(self, cache: ResourceCache, trust_domain: str = DEFAULT_TRUST_DOMAIN):
        self.cache = cache
        self.trust_domain = trust_domain
        self.sources: dict[ObjectKey, Resource] = {}
        self.clusters: dict[str, ClusterInfo] = {}
        self.reported: dict[ObjectKey, tuple[str, tuple[str, ...]]] = {}
        """ServiceEndpoint key -> (cluster, ingress addresses it reported)."""
        self._stale = True

    def reset(self, objects: Iterable[StoredObject]) -> None:
        self.sources, self.clusters, self.reported = {}, {}, {}
        for stored in objects:
            self.upsert(stored)
        self._stale = True

    def upsert(self, stored: StoredObject) -> None:
        key = stored.key
        if stored.kind == REPORTED_KIND:
            self._report(key, reported_ingress(stored))
            return
        try:
            feeds = REGISTRY.get(stored.kind).feeds
            if Feed.FLEET in feeds:
                self.clusters[stored.name] = stored_cluster_info(stored)
            elif Feed.MANIFESTS in feeds:
                self.sources[key] = to_resource(REGISTRY.get(stored.kind), stored)
            else:
                return
        except ValueError as exc:
            log.error("stored object no longer validates; not rendered", kind=stored.kind, error=str(exc))
            self.remove(key)
        self._stale = True

    def _report(self, key: ObjectKey, reported: tuple[str, tuple[str, ...]] | None) -> None:
        """Keep what one endpoint says of its cluster's ingress; a re-render only when that changed."""
        if self.reported.get(key) == reported:
            return
        if reported is None:
            del self.reported[key]
        else:
            self.reported[key] = reported
        self._stale = True

    def cluster_infos(self) -> list[ClusterInfo]:
        """The clusters as rendering reads them: declared ingress addresses, else those reported."""
        reported = dict(self.reported.values())
        return [
            info if info.ingress_addresses else dataclasses.replace(info, ingress_addresses=reported.get(name, ()))
            for name, info in self.clusters.items()
        ]

    def remove(self, key: ObjectKey) -> None:
        kind, _, name = key
        if kind == REPORTED_KIND:
            self._report(key, None)
            return
        if Feed.FLEET in REGISTRY.get(kind).feeds and self.clusters.pop(name, None) is not None:
            self.cache.set_type(name, MANIFEST_TYPE, {})
        self.sources.pop(key, None)
        self._stale = True

    def flush(self) -> None:
        """Render every cluster if anything changed since the last flush."""
        if not self._stale:
            return
        fleet = render_fleet(self.cluster_infos(), self.sources.values(), self.trust_domain)
        for cluster in sorted(self.clusters):
            self.cache.set_type(cluster, MANIFEST_TYPE, packed_manifests(render_cluster(fleet, cluster)))
        self._stale = False
