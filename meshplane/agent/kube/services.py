"""This cluster's Kubernetes Services, followed with a watch: the agent reports them up as the cluster's
services, and resolves the API backends that name a service with them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from meshplane.agent.kube.client import KubeClient, ResourceType
from meshplane.agent.kube.watch import follow
from meshplane.lifecycle import DEFAULT_BACKOFF, Backoff
from meshplane.model.kinds import EastWestGateway
from meshplane.model.services import ServiceEndpointSpec
from meshplane.observability.logging import get_logger

log = get_logger("meshplane.agent.kube.services")

SERVICES = ResourceType("v1", "Service", "services", namespaced=True)
UNREPORTED_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease"})
"""Kubernetes' own machinery: backends may still name its services, but they are listed nowhere."""

ServiceKey = tuple[str, str]
"""(namespace, name)"""
OnChange = Callable[[set[ServiceKey] | None], Awaitable[None]]
"""Told which services changed, or None for all of them (the first list)."""


@dataclass(frozen=True)
class LocalService:
    labels: Mapping[str, str]
    spec: ServiceEndpointSpec


def local_service(cluster: str, obj: Mapping[str, Any], gateway: EastWestGateway | None) -> LocalService:
    """A Service object as the listing has it (ValidationError for one the model cannot take)."""
    meta, spec = obj["metadata"], obj.get("spec") or {}
    balanced = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    load_balancer = [address for entry in balanced if (address := entry.get("ip") or entry.get("hostname"))]
    ips = spec.get("clusterIPs") or ([spec["clusterIP"]] if spec.get("clusterIP") else [])
    ports = [
        {
            key: port[key]
            for key in ("name", "port", "protocol", "targetPort", "appProtocol")
            if port.get(key) is not None
        }
        for port in spec.get("ports") or []
    ]
    endpoint = ServiceEndpointSpec.model_validate(
        {
            "cluster": cluster,
            "namespace": meta["namespace"],
            "service": meta["name"],
            "ports": ports,
            "clusterIPs": [ip for ip in ips if ip != "None"],  # "None": a headless service
            "eastWestGateway": gateway,
            "loadBalancer": load_balancer or None,
        }
    )
    return LocalService(dict(meta.get("labels") or {}), endpoint)


class ServiceWatch:
    """The cluster's services by (namespace, name); None until the first list has completed."""

    def __init__(
        self,
        client: KubeClient,
        cluster: str,
        gateway: EastWestGateway | None,
        on_change: OnChange,
        backoff: Backoff = DEFAULT_BACKOFF,
    ):
        self.client = client
        self.backoff = backoff
        self.cluster = cluster
        self.gateway = gateway
        self.on_change = on_change
        self.services: dict[ServiceKey, LocalService] | None = None

    def specs(self) -> dict[ServiceKey, ServiceEndpointSpec] | None:
        """What API backends resolve with: every service, whatever its namespace."""
        if self.services is None:
            return None
        return {key: service.spec for key, service in self.services.items()}

    def reportable(self) -> dict[ServiceKey, LocalService] | None:
        """The cluster's services: those outside Kubernetes' own namespaces."""
        if self.services is None:
            return None
        return {key: service for key, service in self.services.items() if key[0] not in UNREPORTED_NAMESPACES}

    async def run(self) -> None:
        await follow(self.client, SERVICES, self._listed, self._changed, self.backoff)

    def _entry(self, obj: Mapping[str, Any]) -> tuple[ServiceKey, LocalService] | None:
        meta = obj["metadata"]
        try:
            return (meta["namespace"], meta["name"]), local_service(self.cluster, obj, self.gateway)
        except ValidationError as exc:
            log.warning(
                "service left out of the listing", namespace=meta["namespace"], name=meta["name"], error=str(exc)
            )
            return None

    async def _listed(self, items: list[dict[str, Any]]) -> None:
        before = self.services
        self.services = dict(entry for item in items if (entry := self._entry(item)) is not None)
        if before is None:
            await self.on_change(None)
            return
        changed = {key for key in before.keys() | self.services.keys() if before.get(key) != self.services.get(key)}
        if changed:
            await self.on_change(changed)

    async def _changed(self, kind: str, obj: dict[str, Any]) -> None:
        assert self.services is not None  # a watch always follows a list
        meta = obj["metadata"]
        key = (meta["namespace"], meta["name"])
        entry = None if kind == "DELETED" else self._entry(obj)
        before = self.services.pop(key, None)
        if entry is not None:
            self.services[key] = entry[1]
        if before != self.services.get(key):
            await self.on_change({key})
