"""Sends the agent's queued reports up, oldest first, until the server has taken each one.

Reports wait in the local state while the server is away; gRPC's retry policy (from the config)
handles short blips inside one call, and the sender retries longer outages with the same policy's backoff.
Each report's idempotency key is fixed when it is queued, so a retry is applied once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import grpc

from meshplane.agent.state import LocalState
from meshplane.lifecycle import DEFAULT_BACKOFF, Backoff, retry_forever
from meshplane.observability.logging import get_logger
from meshplane.proto.v1 import control_plane_pb2, control_plane_pb2_grpc

log = get_logger("meshplane.agent.reporter")

# Answers that no retry can change: the report itself is wrong, or not the cluster's to make, so keeping it
# would block the queue.
REFUSED = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.ALREADY_EXISTS,
}

ObjectsRefused = Callable[[list[control_plane_pb2.LocalObject], str], Awaitable[None]]
"""Told of the objects of a report the server refused, with its reason."""

# Queued bodies are serialized requests: a ReportStatusRequest as is, a ReportObjectsRequest behind this
# tag (no protobuf message starts with a zero byte, field number 0 being invalid).
_OBJECTS_TAG = b"\x00objects\x00"


class Reporter:
    def __init__(
        self,
        state: LocalState,
        channel: Callable[[], grpc.aio.Channel],
        cluster: str,
        objects_refused: ObjectsRefused | None = None,
        backoff: Backoff = DEFAULT_BACKOFF,
    ):
        self.state = state
        self.channel = channel
        self.cluster = cluster
        self.objects_refused = objects_refused
        self.backoff = backoff
        self.wake = asyncio.Event()

    async def report_status(self, deliveries: list[control_plane_pb2.ObjectDelivery]) -> None:
        """Queue a status report durably and wake the sender."""
        if not deliveries:
            return
        request = control_plane_pb2.ReportStatusRequest(cluster=self.cluster, deliveries=deliveries)
        await self.state.enqueue_report(request.SerializeToString())
        self.wake.set()

    async def report_objects(self, objects: list[control_plane_pb2.LocalObject]) -> None:
        """Queue a report of objects made in the cluster durably and wake the sender."""
        if not objects:
            return
        request = control_plane_pb2.ReportObjectsRequest(cluster=self.cluster, objects=objects)
        await self.state.enqueue_report(_OBJECTS_TAG + request.SerializeToString())
        self.wake.set()

    async def run(self) -> None:
        while True:
            self.wake.clear()
            sent = await retry_forever(
                self._send_pending,
                what="sending reports",
                backoff=self.backoff,
                retry_on=(grpc.aio.AioRpcError,),
                logger=log,
            )
            if not sent:
                await self.wake.wait()

    async def _send_pending(self) -> int:
        """Send every queued report, oldest first, dropping each once the server has taken or refused it;
        returns how many there were. AioRpcError when the server could not take one: it stays queued."""
        pending = await self.state.pending_reports()
        stub = control_plane_pb2_grpc.ControlPlaneStub(self.channel()) if pending else None
        for seq, body in pending:
            assert stub is not None
            key = f"{self.cluster}/{self.state.instance}/{seq}"
            objects = None
            try:
                if body.startswith(_OBJECTS_TAG):
                    objects = control_plane_pb2.ReportObjectsRequest.FromString(body[len(_OBJECTS_TAG) :])
                    objects.idempotency_key = key
                    await stub.ReportObjects(objects, timeout=10)
                else:
                    request = control_plane_pb2.ReportStatusRequest.FromString(body)
                    request.idempotency_key = key
                    await stub.ReportStatus(request, timeout=10)
            except grpc.aio.AioRpcError as exc:
                if exc.code() not in REFUSED:
                    raise
                log.error("server refused a report; dropped", code=exc.code().name, detail=exc.details())
                await self.state.drop_report(seq)
                if objects is not None and self.objects_refused is not None:
                    await self.objects_refused(list(objects.objects), exc.details() or exc.code().name)
                continue
            await self.state.drop_report(seq)
        return len(pending)
