"""What the cluster's Kubernetes should hold, computed from what the agent holds (pure)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from meshplane.model.manifests import MANIFEST_TYPE
from meshplane.model.resource import API_VERSION, Resource

MANAGED_BY = "meshplane.io/managed-by"
MANAGED_BY_VALUE = "control-plane"
MANAGED_SELECTOR = f"{MANAGED_BY}={MANAGED_BY_VALUE}"
DELIVERED_VERSION = "meshplane.io/delivered-version"

# Every kind the agent may have written: listed for garbage collection even when none is delivered now,
# so that objects of a kind the control plane stopped rendering altogether are still removed.
MANAGED_KINDS: tuple[tuple[str, str], ...] = (
    (API_VERSION, "API"),
    ("networking.istio.io/v1", "Gateway"),
    ("networking.istio.io/v1", "VirtualService"),
    ("networking.istio.io/v1", "DestinationRule"),
    ("networking.istio.io/v1", "ServiceEntry"),
    ("networking.istio.io/v1", "Sidecar"),
    ("security.istio.io/v1", "AuthorizationPolicy"),
    ("security.istio.io/v1", "PeerAuthentication"),
    ("security.istio.io/v1", "RequestAuthentication"),
    ("externaldns.k8s.io/v1alpha1", "DNSEndpoint"),
)


@dataclass(frozen=True)
class ObjectKey:
    """Where an object lives in Kubernetes."""

    api_version: str
    kind: str
    namespace: str
    name: str

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> ObjectKey:
        meta = obj["metadata"]
        return cls(obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])


@dataclass(frozen=True)
class DesiredObject:
    """A delivered resource (type URL, name, version) and the Kubernetes object it becomes."""

    type_url: str
    name: str
    version: str
    body: dict[str, Any]

    @property
    def key(self) -> ObjectKey:
        return ObjectKey.of(self.body)


def kubernetes_object(held: Resource | Mapping[str, Any], version: str) -> dict[str, Any]:
    """A held object as Kubernetes should store it: a CR of our CRDs in its project's namespace, or the
    rendered manifest itself; either marked as managed by the control plane, at `version`."""
    if isinstance(held, Resource):
        wire = held.to_wire()
        meta = wire["metadata"]
        body = {
            "apiVersion": wire["apiVersion"],
            "kind": wire["kind"],
            "metadata": {
                "name": meta["name"],
                "namespace": meta["project"],
                "labels": dict(meta.get("labels") or {}),
                "annotations": dict(meta.get("annotations") or {}),
            },
            "spec": wire["spec"],
        }
    else:
        body = copy.deepcopy(dict(held))
        body["metadata"] = {
            **body["metadata"],
            "labels": dict(body["metadata"].get("labels") or {}),
            "annotations": dict(body["metadata"].get("annotations") or {}),
        }
    body["metadata"]["labels"][MANAGED_BY] = MANAGED_BY_VALUE
    body["metadata"]["annotations"][DELIVERED_VERSION] = version
    return body


def desired_objects(
    held: Mapping[str, Mapping[str, Resource | Mapping[str, Any]]],
    versions: Mapping[str, Mapping[str, str]],
    applied_kinds: frozenset[str],
) -> dict[ObjectKey, DesiredObject]:
    """Every held object of a kind applied to Kubernetes (`applied_kinds`, by type URL; manifests always),
    keyed by where it lives. `versions` is type URL -> name -> delivered version."""
    desired: dict[ObjectKey, DesiredObject] = {}
    for type_url, objects in held.items():
        if type_url != MANIFEST_TYPE and type_url not in applied_kinds:
            continue
        for name, obj in objects.items():
            version = versions.get(type_url, {}).get(name, "")
            item = DesiredObject(type_url, name, version, kubernetes_object(obj, version))
            desired[item.key] = item
    return desired


def delivered_version(actual: Mapping[str, Any]) -> str | None:
    return (actual.get("metadata", {}).get("annotations") or {}).get(DELIVERED_VERSION)
