"""What an agent holds, serves and rejected, as one value.

The runtime takes it from its state whenever it rebuilds and reads from it what the gateways are offered;
the admin dump shows it. Whether the gateways rejected a version is decided here and nowhere else, and
so is what takes the place of a version that is rejected or that this cluster refuses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from meshplane.model.meta import cluster_origin
from meshplane.model.registry import REGISTRY
from meshplane.model.resource import Resource

API_TYPE = REGISTRY.get("API").type_url

Held = Resource | dict[str, Any]
"""What the agent holds of a delivered resource: a validated object, or a rendered Kubernetes object."""

Key = tuple[str, str]
"""(type URL, name) of a held object."""

Refusals = Callable[[Sequence[Resource]], Mapping[str, str]]
"""Which of these APIs this cluster will not serve, by name, with the reason (see translate.targets)."""


@dataclass(frozen=True, slots=True)
class HeldObject:
    """One object as the dump shows it: delivered (or made in the cluster, `local`), at its version."""

    type_url: str
    name: str
    version: str
    object: Held
    rejected: bool
    local: bool = False


@dataclass(frozen=True, slots=True)
class Offer:
    """What the gateways are offered by type URL and name, and the APIs this cluster refuses (with why)."""

    objects: dict[str, dict[str, Held]]
    refused: dict[str, str]

    def rejected_by(self, changed: Mapping[Key, str]) -> dict[Key, str]:
        """The changed versions a rejection of this offer is about: an API refused here was never in it."""
        return {
            (type_url, name): version
            for (type_url, name), version in changed.items()
            if not (type_url == API_TYPE and name in self.refused)
        }


@dataclass(frozen=True, slots=True)
class Holdings:
    """The agent at one moment: the delivered objects it holds and their versions, the cluster's own APIs,
    the versions the gateways rejected, the APIs it last refused, and what it last served."""

    cluster: str
    delivered: Mapping[str, Mapping[str, Held]]
    versions: Mapping[str, Mapping[str, str]]
    local: Mapping[str, Resource]
    local_versions: Mapping[str, str]
    rejected: Mapping[Key, str]
    refused: Mapping[str, str]
    serving: Mapping[str, Mapping[str, Held]]

    def is_rejected(self, type_url: str, name: str, version: str | None) -> bool:
        """The gateways rejected this version: it is never offered again."""
        return version is not None and self.rejected.get((type_url, name)) == version

    def offer(self, refusals: Refusals) -> Offer:
        """What the gateways should serve: everything held, except versions they rejected and APIs this
        cluster refuses; for those the last version served stays in force (or nothing, for an object never
        served).

        The cluster's own APIs are served as its Kubernetes has them now, never as the control plane's
        copy of them: one API each, and one deleted in the cluster is gone without the control plane.
        """
        objects = {
            type_url: self._unrejected(type_url, held, self.versions.get(type_url, {}))
            for type_url, held in self.delivered.items()
        }
        apis = objects.setdefault(API_TYPE, {})
        for name in self.local_names():
            apis.pop(name, None)
        apis.update(self._unrejected(API_TYPE, self.local, self.local_versions))
        refused = dict(refusals([held for held in apis.values() if isinstance(held, Resource)]))
        for name in refused:
            good = self.serving.get(API_TYPE, {}).get(name)
            if isinstance(good, Resource) and not refusals([good]):
                apis[name] = good
            else:
                apis.pop(name, None)
        return Offer(objects, refused)

    def _unrejected(self, type_url: str, held: Mapping[str, Held], versions: Mapping[str, str]) -> dict[str, Held]:
        out: dict[str, Held] = {}
        for name, resource in held.items():
            if not self.is_rejected(type_url, name, versions.get(name)):
                out[name] = resource
            elif (good := self.serving.get(type_url, {}).get(name)) is not None:
                out[name] = good
        return out

    def local_names(self) -> list[str]:
        """Names (project/name) of delivered APIs whose origin is this cluster."""
        origin = cluster_origin(self.cluster)
        return [
            name
            for name, held in self.delivered.get(API_TYPE, {}).items()
            if isinstance(held, Resource) and held.metadata.origin == origin
        ]

    def refusals_changed(self, refused: Mapping[str, str]) -> dict[Key, str]:
        """Delivered APIs whose refusal here began, ended or changed reason against the last one kept,
        without a new version (the agent's settings changed across a restart, or a service backend
        moved): their status must say so."""
        versions = self.versions.get(API_TYPE, {})
        names = {name for name in {*refused, *self.refused} if refused.get(name) != self.refused.get(name)}
        delivered = (name for name in sorted(names) if name in versions and name not in self.local)
        return {(API_TYPE, name): versions[name] for name in delivered}

    def to_apply(self) -> dict[str, dict[str, Held]]:
        """The delivered objects this cluster's Kubernetes should hold: the cluster's own APIs that came
        back from the control plane stay the cluster's own."""
        delivered = {type_url: dict(held) for type_url, held in self.delivered.items()}
        for name in self.local_names():
            delivered.get(API_TYPE, {}).pop(name, None)
        return delivered

    def own_apis(self) -> list[tuple[str, str]]:
        """(project, name) of every API the cluster made that the agent knows: kept, or back from the
        control plane."""
        names = {*self.local_names(), *self.local}
        return [(project, name) for project, _, name in (key.partition("/") for key in sorted(names))]

    def objects(self) -> list[HeldObject]:
        """Every object held, delivered ones by type URL and name, then the cluster's own by name."""
        out = []
        for type_url, held in sorted(self.delivered.items()):
            versions = self.versions.get(type_url, {})
            for name, resource in sorted(held.items()):
                version = versions.get(name, "")
                out.append(HeldObject(type_url, name, version, resource, self.is_rejected(type_url, name, version)))
        for name, api in sorted(self.local.items()):
            version = self.local_versions.get(name, "")
            out.append(HeldObject(API_TYPE, name, version, api, self.is_rejected(API_TYPE, name, version), local=True))
        return out
