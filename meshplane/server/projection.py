"""The fleet projection: which delivered objects every cluster should hold.

Each object is validated, serialized and hashed once per change; the packed resource is shared by
every cluster it is placed on, and the xDS cache is updated only where something differs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from pydantic import BaseModel

from meshplane.model.kinds import APISpec
from meshplane.model.manifests import DELIVERED_TYPE_URLS, MANIFEST_TYPE
from meshplane.model.meta import Placement, origin_cluster
from meshplane.model.registry import REGISTRY, KindInfo
from meshplane.model.resource import Resource
from meshplane.model.sealed import REVEAL, Reveal, sealed_values
from meshplane.model.stored import ObjectKey, StoredObject, to_resource
from meshplane.model.wire import resource_name, to_message
from meshplane.observability.logging import get_logger
from meshplane.server.api_conflicts import route_bucket
from meshplane.server.placement import (
    FOLLOWED,
    LEADING,
    followers_placement,
    follows,
    placed_clusters,
    served_placement,
)
from meshplane.xds.cache import ResourceCache
from meshplane.xds.resource import VersionedResource, pack

log = get_logger("meshplane.server.projection")


@dataclass(frozen=True, slots=True)
class DeliveredObject:
    """`revision` and `changed_at`: the object's last write when this version was read, which is the
    change that made it unless a status write came between (clusters' delivery lag counts from them)."""

    info: KindInfo
    resource: VersionedResource
    placement: Placement
    spec: BaseModel
    revision: int
    changed_at: datetime


def placement_of(resource: Resource) -> Placement:
    """Where an object goes (see `served_placement`); kinds without a placement go everywhere."""
    asked = getattr(resource.spec, "placement", None) or Placement()
    return served_placement(asked, resource.metadata.origin)


Unseal = Callable[[ObjectKey, BaseModel], BaseModel]
"""Opens a spec's write-only values (see `server.sealing`), to be delivered; raises ValueError if it cannot."""


def deliver(
    info: KindInfo, stored: StoredObject, trace: Mapping[str, str] | None = None, unseal: Unseal | None = None
) -> DeliveredObject:
    """Validate and pack a stored object once, for every cluster that will receive it; `trace` is the
    context of the write that made this version, which its pushes will join. Its write-only values are
    delivered as they were written, opened by `unseal` (without one, none is delivered)."""
    resource = to_resource(info, stored)
    if unseal is not None and any(True for _ in sealed_values(resource.spec)):
        resource = resource.model_copy(update={"spec": unseal(stored.key, resource.spec)})
    message = to_message(info, resource, {REVEAL: Reveal.DELIVERED})
    packed = pack(resource_name(stored.project, stored.name), message, trace)
    return DeliveredObject(info, packed, placement_of(resource), resource.spec, stored.revision, stored.updated_at)


@dataclass(frozen=True, slots=True)
class Hold:
    """What an active rollout keeps clusters it has not reached on: `released` clusters get the object's newest
    version, one named in `kept` the version given there, any other `baseline` (None: no version at all)."""

    released: frozenset[str]
    kept: Mapping[str, DeliveredObject | None]
    baseline: DeliveredObject | None

    def version_for(self, cluster: str, newest: DeliveredObject) -> DeliveredObject | None:
        if cluster in self.released:
            return newest
        return self.kept.get(cluster, self.baseline)


def _placed_with(before: frozenset[str], cluster: str, selected: bool) -> frozenset[str]:
    """`before` with `cluster` in it or out of it; `before` itself when that changes nothing."""
    if selected == (cluster in before):
        return before
    return before | {cluster} if selected else before - {cluster}


class FleetProjection:
    def __init__(self, cache: ResourceCache, unseal: Unseal | None = None):
        self.cache = cache
        self.unseal = unseal
        self.clusters: dict[str, dict[str, str]] = {}
        self.objects: dict[ObjectKey, DeliveredObject] = {}
        self.placed: dict[ObjectKey, frozenset[str]] = {}
        self._dirty: set[ObjectKey] = set()
        self._related: dict[str, set[ObjectKey]] = {}
        """project -> its APIs and followers: what a follower's placement is computed from."""
        self._followers: Counter[str] = Counter()
        """project -> how many followers it has: most changes need not compute followers at all."""
        self._routes: dict[str | None, dict[ObjectKey, APISpec]] = {}
        """APIs by route bucket (their basePath's first segment; None: templated): for write-time checks."""
        self._route_bucket: dict[ObjectKey, str | None] = {}
        self.holds: dict[ObjectKey, Hold] = {}
        """Objects whose newest version an active rollout has not given every cluster yet."""

    def _project_objects(self, project: str) -> dict[ObjectKey, DeliveredObject]:
        return {key: self.objects[key] for key in self._related.get(project, ())}

    def _follow(self, project: str) -> dict[ObjectKey, frozenset[str]]:
        """Where the followers of `project` go now; nothing to compute for a project without followers."""
        if not self._followers[project]:
            return {}
        return followers_placement(project, self._project_objects(project), self.placed)

    def _index(self, key: ObjectKey, present: bool) -> None:
        if key[0] == FOLLOWED:
            self._index_routes(key, present)
        follower = follows(key[0])
        if not follower and key[0] not in LEADING:
            return
        related = self._related.setdefault(key[1], set())
        if present == (key in related):
            return
        if present:
            related.add(key)
        else:
            related.discard(key)
        if follower:
            self._followers[key[1]] += 1 if present else -1

    def _index_routes(self, key: ObjectKey, present: bool) -> None:
        if key in self._route_bucket:
            self._routes[self._route_bucket.pop(key)].pop(key, None)
        delivered = self.objects.get(key) if present else None
        if delivered is not None and isinstance(delivered.spec, APISpec) and delivered.spec.base_path is not None:
            # Route checks weigh APIs where they are served, which for a cluster's own is not its placement.
            spec = delivered.spec.model_copy(update={"placement": delivered.placement})
            bucket = self._route_bucket[key] = route_bucket(spec.base_path)
            self._routes.setdefault(bucket, {})[key] = spec

    def reset(
        self,
        objects: Iterable[StoredObject],
        clusters: Iterable[StoredObject],
        traces: Mapping[ObjectKey, Mapping[str, str]] | None = None,
        holds: Mapping[ObjectKey, Hold] | None = None,
    ) -> None:
        """Rebuild from a consistent snapshot of the store; every cluster's set is replaced at once.
        `traces`: the context of the write that made each object what it is, where that write was traced;
        `holds`: the active rollouts' (see `hold`)."""
        self.clusters = {c.name: dict(c.labels) for c in clusters}
        self.holds = dict(holds or {})
        self.objects = {}
        self._related, self._followers = {}, Counter()
        self._routes, self._route_bucket = {}, {}
        traces = traces or {}
        for stored in objects:
            if (delivered := self.deliverable(stored, traces.get(stored.key))) is not None:
                self.objects[stored.key] = delivered
                self._index(stored.key, True)
        alike: dict[frozenset[str], frozenset[str]] = {}  # one set object per distinct placement
        self.placed = {}
        for key, obj in self.objects.items():
            if obj.info.follows is None:
                placed = self._placement(obj)
                self.placed[key] = alike.setdefault(placed, placed)
        for project in list(self._related):
            self.placed.update(self._follow(project))
        self._dirty.update(self.objects)
        for group in set(self.cache.groups()) | set(self.clusters):
            self._publish_cluster(group)

    def upsert_object(self, stored: StoredObject, trace: Mapping[str, str] | None = None) -> None:
        key = stored.key
        delivered = self.deliverable(stored, trace)
        if delivered is None:
            self.remove_object(key)
            return
        before = self.placed.get(key, frozenset())
        self.objects[key] = delivered
        self._index(key, True)
        self._dirty.add(key)
        if delivered.info.follows is not None:
            after = self._follow(stored.project).get(key, frozenset())
        else:
            after = self._placement(delivered)
        self._move(key, delivered, before, after, upsert=True)
        self._refollow(stored.project)

    def _move(
        self, key: ObjectKey, obj: DeliveredObject, before: frozenset[str], after: frozenset[str], upsert: bool
    ) -> None:
        """Place an object on `after` (sending it again where it already was when it changed)."""
        self.placed[key] = after
        if key in self.holds:
            self._serve_held(key, self.clusters.keys() | before)
            return
        type_url = obj.info.type_url
        for cluster in after if upsert else after - before:
            self.cache.update(cluster, type_url, upserts=[obj.resource])
        for cluster in before - after:
            self.cache.update(cluster, type_url, removals=[obj.resource.name])

    def _refollow(self, project: str) -> None:
        """Objects that follow the APIs they touch move when an API, subscription or application does."""
        for key, after in self._follow(project).items():
            before = self.placed.get(key, frozenset())
            if after != before:
                self._dirty.add(key)
                self._move(key, self.objects[key], before, after, upsert=False)

    def remove_object(self, key: ObjectKey) -> None:
        """A deleted object goes from every cluster at once, whatever version a rollout kept there."""
        self._dirty.add(key)
        delivered = self.objects.pop(key, None)
        placed = self.placed.pop(key, frozenset())
        self._index(key, False)
        if delivered is None:
            return
        if self.holds.pop(key, None) is not None:
            placed = self._holding(delivered.info.type_url, delivered.resource.name)
        for cluster in placed:
            self.cache.update(cluster, delivered.info.type_url, removals=[delivered.resource.name])
        self._refollow(key[1])

    def hold(self, key: ObjectKey, hold: Hold | None) -> None:
        """Serve an object's clusters the versions an active rollout allows them (None: the rollout is over, every
        placed cluster gets the newest)."""
        if hold is None and self.holds.pop(key, None) is None:
            return
        if hold is not None:
            self.holds[key] = hold
        self._dirty.add(key)
        obj = self.objects.get(key)
        if obj is None:
            return
        self._serve_held(key, self.clusters.keys() | self._holding(obj.info.type_url, obj.resource.name))

    def served(self, key: ObjectKey, cluster: str) -> DeliveredObject | None:
        """The version of an object `cluster` should hold now (None: none)."""
        obj = self.objects.get(key)
        if obj is None or cluster not in self.clusters:
            return None
        hold = self.holds.get(key)
        if hold is None:
            return obj if cluster in self.placed.get(key, frozenset()) else None
        version = hold.version_for(cluster, obj)
        if version is None:
            return None
        if obj.info.follows is not None:
            return version if cluster in self.placed.get(key, frozenset()) else None
        return version if version.placement.selects(cluster, self.clusters[cluster]) else None

    def served_versions(self, key: ObjectKey) -> dict[str, str]:
        """cluster -> the version it should hold of the object, for every cluster that should hold one."""
        obj = self.objects.get(key)
        if obj is None:
            return {}
        if key not in self.holds:
            return dict.fromkeys(self.placed.get(key, frozenset()), obj.resource.version)
        versions = {cluster: self.served(key, cluster) for cluster in self.clusters}
        return {cluster: v.resource.version for cluster, v in versions.items() if v is not None}

    def _holding(self, type_url: str, name: str) -> set[str]:
        """The clusters whose cache holds a resource now."""
        return {group for group in self.cache.groups() if name in self.cache.resources(group, type_url)}

    def _serve_held(self, key: ObjectKey, clusters: Iterable[str]) -> None:
        """Make each of `clusters` hold the version of a held object it should (see `served`)."""
        obj = self.objects[key]
        type_url, name = obj.info.type_url, obj.resource.name
        for cluster in clusters:
            want = self.served(key, cluster)
            have = self.cache.resources(cluster, type_url).get(name)
            if want is None and have is not None:
                self.cache.update(cluster, type_url, removals=[name])
            elif want is not None and (have is None or have.version != want.resource.version):
                self.cache.update(cluster, type_url, upserts=[want.resource])

    def upsert_cluster(self, name: str, labels: Mapping[str, str]) -> None:
        if self.clusters.get(name) == dict(labels):
            return
        self.clusters[name] = dict(labels)
        self._replace_cluster(name)

    def remove_cluster(self, name: str) -> None:
        if self.clusters.pop(name, None) is not None:
            self._replace_cluster(name)

    def api_lookup(self, spec: APISpec) -> tuple[Mapping[str, Mapping[str, str]], list[tuple[str, str, APISpec]]]:
        """The clusters and the APIs, as this server last saw them, whose routes may meet `spec`'s: those in
        its route bucket and the templated ones (every API for a templated basePath); none for an API attached
        to Gateway API routes, which has no routes of its own."""
        if spec.base_path is None:
            return self.clusters, []
        bucket = route_bucket(spec.base_path)
        buckets = (
            self._routes.values() if bucket is None else (self._routes.get(bucket, {}), self._routes.get(None, {}))
        )
        apis = [(project, name, other) for apis in buckets for (_, project, name), other in apis.items()]
        return self.clusters, apis

    def take_dirty(self) -> set[ObjectKey]:
        """Objects whose version or placement changed since the last call: what status must look at."""
        dirty, self._dirty = self._dirty, set()
        return dirty

    def cluster_resources(self, cluster: str) -> dict[str, dict[str, VersionedResource]]:
        """What one cluster receives: type URL -> name -> resource."""
        return {type_url: dict(self.cache.resources(cluster, type_url)) for type_url in DELIVERED_TYPE_URLS}

    def _replace_cluster(self, name: str) -> None:
        labels = self.clusters.get(name)
        # Objects placed alike go on sharing one set: each distinct (set before, selected) is made once.
        moved: dict[tuple[frozenset[str], bool], frozenset[str]] = {}
        for key, obj in self.objects.items():
            if obj.info.follows is not None:
                continue
            before = self.placed.get(key, frozenset())
            selected = labels is not None and obj.placement.selects(name, labels)
            after = moved.get((before, selected))
            if after is None:
                after = moved[(before, selected)] = _placed_with(before, name, selected)
            self._place(key, after)
        for project in list(self._related):
            for key, after in self._follow(project).items():
                self._place(key, after)
        self._publish_cluster(name)

    def _place(self, key: ObjectKey, after: frozenset[str]) -> None:
        """Record where an object is now; only one that moved needs its status rolled up again."""
        before = self.placed.get(key, frozenset())
        if after is not before and after != before:
            self._dirty.add(key)
        self.placed[key] = after

    def _publish_cluster(self, cluster: str) -> None:
        snapshot: dict[str, dict[str, VersionedResource]] = {info.type_url: {} for info in REGISTRY.delivered()}
        # Rendered manifests are kept by the manifest projection; a snapshot of objects leaves them be.
        snapshot[MANIFEST_TYPE] = dict(self.cache.resources(cluster, MANIFEST_TYPE))
        for key, clusters in self.placed.items():
            if cluster in clusters and key not in self.holds:
                obj = self.objects[key]
                snapshot[obj.info.type_url][obj.resource.name] = obj.resource
        for key in self.holds:
            if (version := self.served(key, cluster)) is not None:
                snapshot[version.info.type_url][version.resource.name] = version.resource
        self.cache.set_snapshot(cluster, snapshot)

    def _placement(self, obj: DeliveredObject) -> frozenset[str]:
        return placed_clusters(obj.placement, self.clusters)

    def deliverable(self, stored: StoredObject, trace: Mapping[str, str] | None = None) -> DeliveredObject | None:
        """A stored object (or an earlier version of one, which a rollout keeps on clusters it has not reached)
        packed for delivery; None when it is not to be delivered."""
        info = REGISTRY.get(stored.kind)
        if not info.delivered or stored.deleted:
            return None
        if origin_cluster(stored.origin) is not None and not info.cluster_made:
            # Only a store written before clusters were held to their kinds can hold one: it goes nowhere.
            log.error("a cluster made an object of a kind clusters do not make; not delivered", kind=stored.kind)
            return None
        try:
            return deliver(info, stored, trace, self.unseal)
        except ValueError as exc:
            log.error("stored object no longer validates; not delivered", kind=stored.kind, error=str(exc))
            return None
