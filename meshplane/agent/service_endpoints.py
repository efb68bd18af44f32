"""Keeps the server's copy of this cluster's service endpoints equal to the cluster's own.

Services are state, not events: the agent compares what the cluster has with what the server has
acknowledged and sends the difference, so changes made while the server is away fold into one report
instead of queueing, and a burst of changes (a chart installing twenty services) goes up together.
Nothing is kept across restarts, because nothing needs to be: the first report after a start is a
complete listing, after which the server drops whatever the cluster lost while the agent was down.
Every change a report makes is idempotent, so a report that is retried after a lost answer does no harm.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import grpc
from google.protobuf import struct_pb2

from meshplane.agent.kube.services import LocalService, ServiceKey
from meshplane.agent.reporter import REFUSED
from meshplane.lifecycle import DEFAULT_BACKOFF, Backoff, retry_forever
from meshplane.observability.logging import get_logger
from meshplane.proto.v1 import control_plane_pb2, control_plane_pb2_grpc

log = get_logger("meshplane.agent.service_endpoints")

SETTLE = 0.2
"""Seconds a change waits for the ones that come with it, so that they share one report."""
BATCH = 200
"""Services per report: far below gRPC's message limit whatever their ports and labels."""


def _reported(service: LocalService) -> control_plane_pb2.ReportedService:
    spec = struct_pb2.Struct()
    spec.update(service.spec.to_wire())
    return control_plane_pb2.ReportedService(labels=dict(service.labels), spec=spec)


def _keys(keys: list[ServiceKey]) -> list[control_plane_pb2.ServiceKey]:
    return [control_plane_pb2.ServiceKey(namespace=namespace, name=name) for namespace, name in keys]


def _batches(items: list[Any]) -> list[list[Any]]:
    return [items[start : start + BATCH] for start in range(0, len(items), BATCH)]


class ServiceEndpointSync:
    def __init__(
        self,
        channel: Callable[[], grpc.aio.Channel],
        cluster: str,
        services: Callable[[], Mapping[ServiceKey, LocalService] | None],
        backoff: Backoff = DEFAULT_BACKOFF,
    ):
        """`services()` is what the cluster has now, or None while it is not known yet."""
        self.channel = channel
        self.cluster = cluster
        self.services = services
        self.backoff = backoff
        self.wake = asyncio.Event()
        self._acked: dict[ServiceKey, LocalService] = {}
        self._complete = False
        self._keys = (f"{cluster}/services/{uuid.uuid4().hex}/{n}" for n in itertools.count())

    def changed(self) -> None:
        self.wake.set()

    async def run(self) -> None:
        while True:
            await self.wake.wait()
            await asyncio.sleep(SETTLE)
            await retry_forever(
                self._send_current,
                what="reporting the service endpoints",
                backoff=self.backoff,
                retry_on=(grpc.aio.AioRpcError,),
                logger=log,
            )

    async def _send_current(self) -> None:
        """Report the services as they are now (changes made meanwhile included), if it is known yet."""
        self.wake.clear()
        current = self.services()
        if current is not None:
            await self._send(dict(current))

    async def _send(self, current: dict[ServiceKey, LocalService]) -> None:
        """Report what the server has not acknowledged, remembering each batch as soon as it is taken."""
        stub = control_plane_pb2_grpc.ControlPlaneStub(self.channel())
        upserts = sorted(key for key, service in current.items() if self._acked.get(key) != service)
        for batch in _batches(upserts):
            await self._report(stub, services=[_reported(current[key]) for key in batch])
            self._acked.update((key, current[key]) for key in batch)
        for batch in _batches(sorted(key for key in self._acked if key not in current)):
            await self._report(stub, removed=_keys(batch))
            for key in batch:
                del self._acked[key]
        if not self._complete:
            await self._report(stub, complete=True, present=_keys(sorted(current)))
            self._complete = True
            log.info("service endpoints reported in full", services=len(current))

    async def _report(self, stub: control_plane_pb2_grpc.ControlPlaneStub, **fields: Any) -> None:
        request = control_plane_pb2.ReportServicesRequest(
            cluster=self.cluster, idempotency_key=next(self._keys), **fields
        )
        try:
            await stub.ReportServices(request, timeout=10)
        except grpc.aio.AioRpcError as exc:
            if exc.code() not in REFUSED:
                raise
            # No retry can change the answer: counted as sent, so the rest of the services still go up.
            log.error("server refused a service report; skipped", code=exc.code().name, detail=exc.details())
