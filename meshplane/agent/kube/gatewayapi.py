"""The agent's side of the cluster's Gateway API: the objects watched become a GatewayApiState, `program` turns
it into Envoy resources (served beside the translator's) and statuses (written back), again after each change.

Changes are taken together: a burst (a chart applying a Gateway and its routes) is programmed once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from google.protobuf.message import Message

from meshplane.agent.gatewayapi_addresses import AddressPool, Assignment
from meshplane.agent.kube.client import KubeClient
from meshplane.agent.kube.gatewayapi_status import StatusWriter
from meshplane.agent.kube.gatewayapi_watch import GATEWAY_API_KINDS, GatewayApiWatch, Work
from meshplane.agent.kube.tls_secrets import SecretKey, TLSPair
from meshplane.gatewayapi.state import (
    CONTROLLER_NAME,
    BackendService,
    CertificatePair,
    GatewayApiState,
    KubeObject,
    ObjectKey,
    Programmed,
    ServicePort,
    StatusKey,
)
from meshplane.lifecycle import DEFAULT_BACKOFF, Backoff
from meshplane.model.services import ServiceEndpointSpec
from meshplane.observability.logging import get_logger

log = get_logger("meshplane.agent.kube.gatewayapi")

Program = Callable[[GatewayApiState], Programmed]
Resources = Mapping[str, Mapping[str, Message]]
FIELDS = {kind: field for field, kind in GATEWAY_API_KINDS.items()}
"""The GatewayApiState field of each kind."""
SETTLE = 0.1
"""Seconds a change waits for those that come with it."""
RETRY = 5.0
"""Seconds before writing again the statuses that could not be written."""


def backend_services(
    services: Mapping[ObjectKey, ServiceEndpointSpec] | None, endpoints: Mapping[ObjectKey, tuple[Any, ...]]
) -> dict[ObjectKey, BackendService]:
    """The cluster's Services as routes' backendRefs see them: their ports and their slices' ready endpoints."""
    return {
        key: BackendService(
            tuple(ServicePort(port.name or "", port.port, port.protocol, port.app_protocol) for port in spec.ports),
            endpoints.get(key, ()),
        )
        for key, spec in (services or {}).items()
    }


def our_gateways(classes: Mapping[ObjectKey, KubeObject], gateways: Mapping[ObjectKey, KubeObject]) -> dict:
    """The Gateways of a GatewayClass of this controller."""
    ours = {name for (_, name), obj in classes.items() if _ours(obj)}
    return {key: obj for key, obj in gateways.items() if (obj.get("spec") or {}).get("gatewayClassName") in ours}


def owned(statuses: Mapping[StatusKey, Mapping[str, Any]], state: GatewayApiState) -> dict:
    """The statuses of objects of ours only: our GatewayClasses and their Gateways, and routes (whose writer
    keeps to our controller's `parents` entries)."""
    classes = {("GatewayClass", *key) for key, obj in state.gateway_classes.items() if _ours(obj)}
    gateways = {("Gateway", *key) for key in our_gateways(state.gateway_classes, state.gateways)}
    return {
        key: status
        for key, status in statuses.items()
        if key in classes or key in gateways or key[0] in ("HTTPRoute", "GRPCRoute")
    }


def _ours(gateway_class: KubeObject) -> bool:
    return (gateway_class.get("spec") or {}).get("controllerName") == CONTROLLER_NAME


def with_refusals(statuses: Mapping[StatusKey, Mapping[str, Any]], assignment: Assignment) -> dict:
    """The statuses, the Gateways given no address saying why in the condition the spec gives the reason."""
    out = dict(statuses)
    for (namespace, name), refusal in assignment.refused.items():
        key = ("Gateway", namespace, name)
        status = dict(out.get(key) or {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != refusal.condition]
        generation = next(
            (c["observedGeneration"] for c in status.get("conditions") or [] if "observedGeneration" in c), None
        )
        condition = {"type": refusal.condition, "status": "False", "reason": refusal.reason, "message": refusal.message}
        if generation is not None:
            condition["observedGeneration"] = generation
        status["conditions"] = [*conditions, condition]
        out[key] = status
    return out


class GatewayApiController:
    def __init__(
        self,
        client: KubeClient,
        program: Program,
        pool: AddressPool,
        services: Callable[[], Mapping[ObjectKey, ServiceEndpointSpec] | None],
        secrets: Callable[[Iterable[SecretKey]], Mapping[SecretKey, TLSPair]],
        on_programmed: Callable[[], Awaitable[None]],
        backoff: Backoff = DEFAULT_BACKOFF,
        on_seen: Callable[[GatewayApiWatch], Awaitable[None]] | None = None,
    ):
        """`secrets(wanted)` asks for the TLS Secrets listeners name and gives those read so far;
        `on_programmed` publishes `resources` to the gateways; `on_seen` is shown the watch after each pass
        (statuses written included, once the watch sees them)."""
        self.program = program
        self.pool = pool
        self.services = services
        self.secrets = secrets
        self.on_programmed = on_programmed
        self.on_seen = on_seen
        self._wake = asyncio.Event()
        self._reprogram = False
        self.watch = GatewayApiWatch(client, self.changed, self._wake.set, backoff)
        self.writer = StatusWriter(client, self._current)
        self.resources: Resources = {}
        self._statuses: Mapping[StatusKey, Mapping[str, Any]] = {}
        self._wanted: frozenset[SecretKey] = frozenset()

    def changed(self) -> None:
        """Something `program` reads changed: program again soon."""
        self._reprogram = True
        self._wake.set()

    def tasks(self) -> dict[str, Work]:
        return {**self.watch.tasks(), "kube-gateway-api": self.run}

    async def run(self) -> None:
        """Program after a change; after a status changed alone (one written, or someone else's write), only
        see that each object still has ours. A write that failed is tried again after RETRY seconds."""
        while True:
            await self._wake.wait()
            await asyncio.sleep(SETTLE)
            self._wake.clear()
            reprogram, self._reprogram = self._reprogram, False
            try:
                if reprogram:
                    await self.program_once()
                written = await self.writer.write(self._statuses)
                if self.on_seen is not None:
                    await self.on_seen(self.watch)
            except Exception:  # a bug here must not stop the agent following the cluster
                log.exception("programming the Gateway API objects failed")
                written = False
            if not written:
                asyncio.get_running_loop().call_later(RETRY, self._wake.set)

    def state(self) -> tuple[GatewayApiState, Assignment]:
        objects = self.watch.objects
        assignment = self.pool.assign(our_gateways(objects["gateway_classes"], objects["gateways"]))
        pairs = self.secrets(self._wanted)
        state = GatewayApiState(
            **{field: dict(held) for field, held in objects.items()},
            namespaces=dict(self.watch.namespaces),
            services=backend_services(self.services(), self.watch.endpoints()),
            secrets={key: CertificatePair(pair.certificate, pair.private_key) for key, pair in pairs.items()},
            addresses=assignment.addresses,
        )
        return state, assignment

    async def program_once(self) -> None:
        """Program what the cluster has now and serve it; the statuses it comes to are written next."""
        state, assignment = self.state()
        programmed = self.program(state)
        if programmed.secrets_wanted != self._wanted:
            self._wanted = programmed.secrets_wanted
            self.secrets(self._wanted)  # those not read yet are read at once, and the reader tells when they are
            self.changed()  # those it holds already (read for another listener) it never tells of: program again
        self.resources = programmed.resources
        self._statuses = with_refusals(owned(programmed.statuses, state), assignment)
        await self.on_programmed()

    def _current(self, key: StatusKey) -> Mapping[str, Any] | None:
        kind, namespace, name = key
        field = FIELDS.get(kind)
        return self.watch.objects[field].get((namespace, name)) if field else None
