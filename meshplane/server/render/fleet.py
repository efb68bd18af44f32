"""What rendering reads, and where each intent lands: pure data and pure functions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from meshplane.model.intents import LogicalCloudSpec
from meshplane.model.kinds import ClusterSpec, EastWestGateway
from meshplane.model.meta import Placement
from meshplane.model.resource import Resource
from meshplane.server.render.names import DEFAULT_TRUST_DOMAIN

GROUP_LABEL = "meshplane.io"
OWNER_PROJECT = f"{GROUP_LABEL}/project"
OWNER_KIND = f"{GROUP_LABEL}/intent-kind"
OWNER_NAME = f"{GROUP_LABEL}/intent"
MANAGED_BY = f"{GROUP_LABEL}/managed-by"


@dataclass(frozen=True)
class ClusterInfo:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    east_west: EastWestGateway | None = None
    ingress_addresses: tuple[str, ...] = ()
    """The ingress gateway's user-facing addresses (declared, else reported); empty when not known."""


INGRESS_GATEWAY_SERVICE = ("istio-system", "istio-ingressgateway")
"""(namespace, name) of the Service whose load balancer a cluster reports as its ingress addresses."""


def cluster_info(name: str, labels: Mapping[str, str], spec: ClusterSpec) -> ClusterInfo:
    """What rendering reads of one Cluster object (the server adds reported ingress addresses where it
    declares none: `ManifestProjection.cluster_infos`)."""
    ingress = tuple(spec.ingress_gateway.addresses) if spec.ingress_gateway else ()
    return ClusterInfo(name, dict(labels), spec.east_west_gateway, ingress)


@dataclass(frozen=True)
class Fleet:
    """Every input of rendering: the clusters, the logical clouds and the intents of all projects.

    Intents are validated `Resource`s of kinds ServiceIntent, EgressIntent and IngressIntent.
    """

    clusters: Mapping[str, ClusterInfo]
    logical_clouds: Mapping[tuple[str, str], LogicalCloudSpec]
    """(project, name) -> spec"""
    service_intents: Sequence[Resource] = ()
    egress_intents: Sequence[Resource] = ()
    ingress_intents: Sequence[Resource] = ()
    trust_domain: str = DEFAULT_TRUST_DOMAIN
    """Istio's trust domain in every cluster (one root, one domain): the prefix of every principal."""


def cloud_members(fleet: Fleet, project: str, cloud: str) -> dict[str, str]:
    """cluster -> namespace of one logical cloud (empty when it does not exist)."""
    spec = fleet.logical_clouds.get((project, cloud))
    if spec is None:
        return {}
    members = {c.name: c.namespace for c in spec.clusters if c.name in fleet.clusters}
    if spec.cluster_selector is not None and spec.namespace is not None:
        for name, info in fleet.clusters.items():
            if spec.cluster_selector.matches(dict(info.labels)):
                members.setdefault(name, spec.namespace)
    return dict(sorted(members.items()))


def placement_targets(fleet: Fleet, project: str, placement: Placement) -> dict[str, str]:
    """cluster -> namespace where an intent applies.

    With a logical cloud: its clusters (narrowed to `placement.clusters` / the selector when given),
    each with the cloud's namespace there. Without one: the clusters the placement selects, and the
    project's name as the namespace.
    """
    if placement.logical_cloud is not None:
        members = cloud_members(fleet, project, placement.logical_cloud)
        if placement.clusters or placement.cluster_selector is not None:
            members = {
                name: ns for name, ns in members.items() if placement.selects(name, dict(fleet.clusters[name].labels))
            }
        return members
    return {
        name: project for name, info in sorted(fleet.clusters.items()) if placement.selects(name, dict(info.labels))
    }


def owner_labels(intent: Resource) -> dict[str, str]:
    """Labels on every object rendered from an intent: who made it, so it is removed with it."""
    return {
        MANAGED_BY: "control-plane",
        OWNER_PROJECT: intent.metadata.project or "",
        OWNER_KIND: intent.kind,
        OWNER_NAME: intent.metadata.name,
    }
