"""The fleets, intents and golden files the egress and ingress render tests share."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path

import yaml

from meshplane.model.intents import LogicalCloudSpec
from meshplane.model.kinds import EastWestGateway
from meshplane.model.meta import Placement
from meshplane.model.registry import REGISTRY
from meshplane.model.resource import Resource
from meshplane.server.render.fleet import OWNER_NAME, OWNER_PROJECT, ClusterInfo, Fleet, placement_targets

GOLDEN = Path(__file__).resolve().parents[1] / "tests" / "unit" / "render" / "golden"


CLUSTERS = ("core-1", "edge-1", "edge-2")


GATEWAY_NAMESPACE = "istio-system"


def scenario_clusters() -> dict[str, ClusterInfo]:
    """East-west gateways on 198.51.100.0/24; ingress addresses on 203.0.113.0/24, edge-2 with IPv6 too."""

    def info(name: str, tier: str, address: str, *ingress: str) -> ClusterInfo:
        return ClusterInfo(name, {"tier": tier}, EastWestGateway(address=address, port=15443), ingress)

    return {
        "edge-1": info("edge-1", "edge", "198.51.100.11", "203.0.113.11"),
        "edge-2": info("edge-2", "edge", "198.51.100.12", "203.0.113.12", "2001:db8::12"),
        "core-1": info("core-1", "core", "198.51.100.21", "203.0.113.21"),
    }


def parse(kind: str, name: str, spec: dict, project: str = "shop") -> Resource:
    return REGISTRY.parse({"kind": kind, "metadata": {"name": name, "project": project}, "spec": spec})


def scenario_fleet(**intents: list[Resource]) -> Fleet:
    return Fleet(clusters=scenario_clusters(), logical_clouds=scenario_clouds(), **intents)


def render_all(render: Callable[[Resource, Fleet, str], list[dict]], intents, fleet: Fleet, cluster: str) -> list[dict]:
    """Every intent's objects for `cluster`, in a total order (a shared Sidecar's copies by owner)."""
    objects = [obj for intent in intents for obj in render(intent, fleet, cluster)]
    return sorted(objects, key=lambda o: (o["kind"], o["metadata"]["namespace"], o["metadata"]["name"], _owner(o)))


def to_yaml(objects: list[dict]) -> str:
    return yaml.safe_dump_all(objects, sort_keys=False, default_flow_style=False) if objects else ""


def check_golden(path: Path, text: str) -> None:
    if REGENERATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.is_file(), f"{path} is missing: run with MESHPLANE_REGENERATE_GOLDEN=1 and review it"
    assert text == path.read_text(), f"{path} differs: if intended, regenerate with MESHPLANE_REGENERATE_GOLDEN=1"


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


PROJECTS = ("shop", "bank")


def fleet_clouds() -> dict[tuple[str, str], LogicalCloudSpec]:
    """Both projects have a retail and an ops cloud; bank's use other namespaces in the same clusters."""
    clouds = dict(scenario_clouds())
    clouds[("bank", "retail")] = LogicalCloudSpec.model_validate(
        {"clusters": [{"name": "edge-2", "namespace": "bank"}, {"name": "core-1", "namespace": "bank"}]}
    )
    clouds[("bank", "ops")] = LogicalCloudSpec.model_validate(
        {"clusterSelector": {"matchLabels": {"tier": "edge"}}, "namespace": "bank-ops"}
    )
    return clouds


def shuffled(fleet: Fleet, seed: int) -> Fleet:
    """The same fleet with every collection in another order."""
    rng = random.Random(seed)
    parts = [
        list(fleet.clusters.items()),
        list(fleet.logical_clouds.items()),
        list(fleet.service_intents),
        list(fleet.egress_intents),
        list(fleet.ingress_intents),
    ]
    for items in parts:
        rng.shuffle(items)
    clusters, clouds, services, egress, ingress = parts
    return Fleet(
        clusters=dict(clusters),
        logical_clouds=dict(clouds),
        service_intents=services,
        egress_intents=egress,
        ingress_intents=ingress,
    )


def project_namespaces(fleet: Fleet, project: str, cluster: str) -> set[str]:
    return {
        ns
        for (owner, cloud) in fleet.logical_clouds
        if owner == project
        for c, ns in placement_targets(fleet, project, _cloud_placement(cloud)).items()
        if c == cluster
    }


REGENERATE = os.environ.get("MESHPLANE_REGENERATE_GOLDEN") == "1"


def scenario_clouds() -> dict[tuple[str, str], LogicalCloudSpec]:
    """retail: edge-1, edge-2 in namespace shop; ops: core-1, edge-1 in namespace ops."""
    return {
        ("shop", "retail"): LogicalCloudSpec.model_validate(
            {"clusters": [{"name": "edge-1", "namespace": "shop"}, {"name": "edge-2", "namespace": "shop"}]}
        ),
        ("shop", "ops"): LogicalCloudSpec.model_validate(
            {"clusters": [{"name": "core-1", "namespace": "ops"}, {"name": "edge-1", "namespace": "ops"}]}
        ),
    }


def _owner(obj: dict) -> tuple[str, str]:
    labels = obj["metadata"]["labels"]
    return labels[OWNER_PROJECT], labels[OWNER_NAME]


def _cloud_placement(cloud: str) -> Placement:
    return Placement(logical_cloud=cloud)
