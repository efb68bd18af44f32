"""The cluster's Gateway API objects, Namespaces' labels and EndpointSlices, followed with watches.

The Gateway API kinds are custom resources: until their CRDs are installed, each watch waits for them
quietly (one line in the log), and starts on its own once they are served.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from meshplane.agent.kube.client import KubeClient, KubeRefused, ResourceType
from meshplane.agent.kube.watch import follow
from meshplane.gatewayapi.state import GROUP, Endpoint, ObjectKey
from meshplane.lifecycle import DEFAULT_BACKOFF, Backoff
from meshplane.observability.logging import get_logger

log = get_logger("meshplane.agent.kube.gatewayapi")

GATEWAY_API_KINDS = {
    "gateway_classes": "GatewayClass",
    "gateways": "Gateway",
    "http_routes": "HTTPRoute",
    "grpc_routes": "GRPCRoute",
    "reference_grants": "ReferenceGrant",
}
"""The GatewayApiState field each kind of gateway.networking.k8s.io/v1 fills."""
GATEWAY_API_VERSION = f"{GROUP}/v1"
NAMESPACES = ResourceType("v1", "Namespace", "namespaces", namespaced=False)
ENDPOINT_SLICES = ResourceType("discovery.k8s.io/v1", "EndpointSlice", "endpointslices", namespaced=True)
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
CRD_POLL = 5.0
"""Seconds between looks for a Gateway API kind not served yet."""

Work = Callable[[], Coroutine[Any, Any, None]]


def object_key(obj: Mapping[str, Any]) -> ObjectKey:
    meta = obj["metadata"]
    return meta.get("namespace", ""), meta["name"]


def essence(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What `program` reads of an object: not its status (ours to write) nor its bookkeeping."""
    meta = {k: v for k, v in obj["metadata"].items() if k not in ("resourceVersion", "managedFields")}
    return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": meta}


def ready_endpoints(endpoint_slice: Mapping[str, Any]) -> list[Endpoint]:
    """The addresses of a slice's endpoints that are ready (not saying so counts as ready, as the spec has it)."""
    ports = {port.get("name") or "": port["port"] for port in endpoint_slice.get("ports") or [] if port.get("port")}
    return [
        Endpoint(address, ports)
        for endpoint in endpoint_slice.get("endpoints") or []
        if (endpoint.get("conditions") or {}).get("ready") is not False
        for address in endpoint.get("addresses") or []
    ]


class GatewayApiWatch:
    """Every object of the kinds `program` reads, as the API server has them now; `on_change` is told when
    what `program` reads changed, `on_status` when only a status did (ours or another controller's)."""

    def __init__(
        self,
        client: KubeClient,
        on_change: Callable[[], None],
        on_status: Callable[[], None],
        backoff: Backoff = DEFAULT_BACKOFF,
    ):
        self.client = client
        self.on_change = on_change
        self.on_status = on_status
        self.backoff = backoff
        self.objects: dict[str, dict[ObjectKey, dict[str, Any]]] = {field: {} for field in GATEWAY_API_KINDS}
        self.listed: set[str] = set()
        """The fields of `objects` whose kind has been listed once: until then, what they hold is not all."""
        self.namespaces: dict[str, dict[str, str]] = {}
        self.slices: dict[ObjectKey, dict[str, Any]] = {}

    def tasks(self) -> dict[str, Work]:
        tasks: dict[str, Work] = {
            f"kube-gateway-api-{kind.lower()}": self._follower(field, kind) for field, kind in GATEWAY_API_KINDS.items()
        }
        tasks["kube-namespaces"] = lambda: self._follow(NAMESPACES, self.namespaces, self._namespace_entries)
        tasks["kube-endpointslices"] = lambda: self._follow(ENDPOINT_SLICES, self.slices, self._slice_entries)
        return tasks

    def endpoints(self) -> dict[ObjectKey, tuple[Endpoint, ...]]:
        """Each Service's ready endpoints, from all of its slices, in a stable order."""
        out: dict[ObjectKey, list[Endpoint]] = {}
        for (namespace, _), endpoint_slice in self.slices.items():
            service = endpoint_slice["labels"].get(SERVICE_NAME_LABEL)
            if service:
                out.setdefault((namespace, service), []).extend(ready_endpoints(endpoint_slice))
        return {key: tuple(sorted(found, key=lambda e: e.address)) for key, found in out.items()}

    def _follower(self, field: str, kind: str) -> Work:
        held = self.objects[field]

        async def listed(items: list[dict[str, Any]]) -> None:
            self.listed.add(field)
            await self._listed(held, {object_key(obj): obj for obj in items}, essence)

        async def run() -> None:
            await follow(
                self.client,
                lambda: self._served(kind),
                listed,
                lambda event, obj: self._changed(held, event, object_key(obj), obj, essence),
                self.backoff,
            )

        return run

    async def _follow(
        self, resource: ResourceType, held: dict, entries: Callable[[list[dict[str, Any]]], dict]
    ) -> None:
        """Follow a kind of which only `entries` is kept (a namespace's labels, a slice's endpoints)."""
        await follow(
            self.client,
            resource,
            lambda items: self._listed(held, entries(items), _same),
            lambda event, obj: self._changed(held, event, *next(iter(entries([obj]).items())), _same),
            self.backoff,
        )

    @staticmethod
    def _namespace_entries(items: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
        return {obj["metadata"]["name"]: dict(obj["metadata"].get("labels") or {}) for obj in items}

    @staticmethod
    def _slice_entries(items: list[dict[str, Any]]) -> dict[ObjectKey, dict[str, Any]]:
        return {
            object_key(obj): {
                "labels": obj["metadata"].get("labels") or {},
                "endpoints": obj.get("endpoints"),
                "ports": obj.get("ports"),
            }
            for obj in items
        }

    async def _served(self, kind: str) -> ResourceType:
        """The kind's resource once its CRD is installed: until then, look again every CRD_POLL seconds."""
        told = False
        while True:
            try:
                return await self.client.resource_type(GATEWAY_API_VERSION, kind)
            except KubeRefused as exc:
                if exc.status_code != 404:
                    raise
            if not told:
                log.info("waiting for the Gateway API CRDs to be installed", kind=kind)
                told = True
            await asyncio.sleep(CRD_POLL)

    async def _listed(self, held: dict, now: dict, compare: Callable[[Any], Any]) -> None:
        before = dict(held)
        held.clear()
        held.update(now)
        self._tell(before, now, compare)

    async def _changed(self, held: dict, event: str, key: Any, value: Any, compare: Callable[[Any], Any]) -> None:
        before = held.pop(key, None)
        if event != "DELETED":
            held[key] = value
        self._tell({} if before is None else {key: before}, {key: value} if key in held else {}, compare)

    def _tell(self, before: Mapping[Any, Any], after: Mapping[Any, Any], compare: Callable[[Any], Any]) -> None:
        if {k: compare(v) for k, v in before.items()} != {k: compare(v) for k, v in after.items()}:
            self.on_change()
        elif before != after:
            self.on_status()


def _same(value: Any) -> Any:
    return value
