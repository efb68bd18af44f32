"""`meshplane.v1.ControlPlane`: the unary calls agents make up to the server."""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import grpc

from meshplane.audit import acting_as
from meshplane.model.meta import check_name
from meshplane.model.registry import REGISTRY
from meshplane.model.resource import InvalidObject
from meshplane.model.status import DeliveryState
from meshplane.observability.logging import get_logger
from meshplane.observability.metrics import REPORTS_REFUSED
from meshplane.proto.v1 import control_plane_pb2, control_plane_pb2_grpc
from meshplane.server.acting import for_cluster
from meshplane.server.cluster_objects import ClusterObjects, ReportRefused
from meshplane.server.objects import ObjectService
from meshplane.server.service_endpoints import apply_report
from meshplane.store.errors import AlreadyExists
from meshplane.store.records import ApiFigureRecord, Delivery
from meshplane.store.store import Store

log = get_logger("meshplane.server.control_plane")


LAST_SEEN_EVERY = 30.0
"""Seconds between two writes of a cluster's `lastSeen` for its reports alone (connects and disconnects
write it at once)."""


def now() -> str:
    return datetime.now(UTC).isoformat()


class ClusterRegistry:
    """Cluster objects as agents see them: created on first contact, presence kept in status.

    Status fields are written behind: queued per cluster (the newest value of a field wins) and written
    for every cluster waiting in one transaction, so a thousand agents reconnecting at once cost a few
    writes, not a thousand, and no stream waits for the store before its first response.
    """

    def __init__(self, store: Store, retry_delay: float = 1.0, last_seen_every: float = LAST_SEEN_EVERY):
        self.store = store
        self.retry_delay = retry_delay
        self.last_seen_every = last_seen_every
        self._last_seen: dict[str, float] = {}
        self._pending: dict[str, dict[str, object]] = {}
        self._writer: asyncio.Task[None] | None = None

    async def register(self, cluster: str, agent_version: str, labels: dict[str, str]) -> int:
        """Create the cluster with the agent's labels if it is new; labels of a known cluster are the
        operator's and are left alone."""
        try:
            await self.store.create("Cluster", "", cluster, spec={}, labels=labels)
            log.info("cluster registered", cluster=cluster, agent_version=agent_version)
        except AlreadyExists:
            pass
        self.update_status(cluster, agentVersion=agent_version, lastSeen=now())
        return await self.store.current_revision()

    def seen(self, cluster: str) -> None:
        """An agent's sign of life (a report): its `lastSeen`, written at most every `last_seen_every`
        seconds per cluster rather than once per report, which would be a write per agent per change."""
        if time.monotonic() - self._last_seen.get(cluster, -math.inf) >= self.last_seen_every:
            self.update_status(cluster, lastSeen=now())

    def update_status(self, cluster: str, **fields: object) -> None:
        """Queue status fields of a cluster (one that does not exist is skipped when written)."""
        if "lastSeen" in fields:
            self._last_seen[cluster] = time.monotonic()
        self._pending.setdefault(cluster, {}).update(fields)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_pending(), name="cluster-status")

    async def flush(self) -> None:
        """Until every status queued so far is written (or found impossible to write, and logged)."""
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)

    async def _write_pending(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, {}
            try:
                await self.store.merge_statuses("Cluster", "", batch)
            except Exception:
                log.exception("cluster status write failed; retrying", clusters=len(batch))
                for cluster, fields in batch.items():  # fields queued meanwhile are newer and win
                    self._pending[cluster] = {**fields, **self._pending.get(cluster, {})}
                await asyncio.sleep(self.retry_delay)


_STATES = {
    control_plane_pb2.PENDING: DeliveryState.PENDING,
    control_plane_pb2.APPLIED: DeliveryState.APPLIED,
    control_plane_pb2.FAILED: DeliveryState.FAILED,
}


def delivery_of(cluster: str, entry: control_plane_pb2.ObjectDelivery, at: datetime) -> Delivery:
    """A reported delivery as the store keeps it; ValueError for an unknown type or state."""
    try:
        info = REGISTRY.by_type_url(entry.type_url)
    except KeyError:
        raise ValueError(f"{entry.type_url!r} is not a delivered type") from None
    if entry.state not in _STATES:
        raise ValueError(f"{entry.name}: no delivery state")
    project, _, name = entry.name.rpartition("/")
    return Delivery(cluster, info.kind, project, name, entry.version, _STATES[entry.state].value, entry.message, at)


MAX_FIGURES = 5000
"""APIs one figures report may carry: more than any cluster serves, few enough to keep a report small."""
MAX_SAMPLE_AHEAD = timedelta(minutes=5)
"""How far ahead of the server's clock a report's sampling time may be: as a newer sample always wins, one
from far ahead would hold the cluster's figures still until the clocks met."""
_STATUS_CLASS = re.compile(r"^[1-5]xx$")


def figure_records(request: control_plane_pb2.ReportFiguresRequest, now: datetime) -> list[ApiFigureRecord]:
    """A figures report received at `now` as the store keeps it; ValueError saying which field is wrong."""
    if not request.HasField("sampled_at"):
        raise ValueError("sampled_at: required")
    sampled_at = request.sampled_at.ToDatetime(tzinfo=UTC)
    if sampled_at > now + MAX_SAMPLE_AHEAD:
        raise ValueError(f"sampled_at: {sampled_at.isoformat()} is ahead of the server's clock ({now.isoformat()})")
    if len(request.figures) > MAX_FIGURES:
        raise ValueError(f"figures: {len(request.figures)} entries, at most {MAX_FIGURES}")
    seen: set[tuple[str, str]] = set()
    kept = []
    for index, entry in enumerate(request.figures):
        where = f"figures[{index}]"
        for field in ("project", "name"):
            try:
                check_name(getattr(entry, field))
            except ValueError as exc:
                raise ValueError(f"{where}.{field}: {exc}") from None
        if (entry.project, entry.name) in seen:
            raise ValueError(f"{where}: {entry.project}/{entry.name} given twice")
        seen.add((entry.project, entry.name))
        _check_counts(where, entry)
        kept.append(
            ApiFigureRecord(
                request.cluster,
                entry.project,
                entry.name,
                entry.requests,
                entry.errors,
                dict(sorted(entry.by_class.items())),
                sampled_at,
            )
        )
    return kept


def _check_counts(where: str, entry: control_plane_pb2.ApiFigure) -> None:
    if entry.requests < 0 or entry.errors < 0:
        raise ValueError(f"{where}: negative count")
    if entry.errors > entry.requests:
        raise ValueError(f"{where}.errors: {entry.errors} errors of {entry.requests} requests")
    for status_class, count in entry.by_class.items():
        if not _STATUS_CLASS.match(status_class):
            raise ValueError(f"{where}.by_class: {status_class!r} is not a status class (1xx to 5xx)")
        if count < 0:
            raise ValueError(f"{where}.by_class.{status_class}: negative count")
    if entry.by_class.get("5xx", 0) != entry.errors:
        raise ValueError(f"{where}.errors: {entry.errors}, but by_class 5xx is {entry.by_class.get('5xx', 0)}")


class ControlPlaneService(control_plane_pb2_grpc.ControlPlaneServicer):
    def __init__(
        self,
        clusters: ClusterRegistry,
        reported: Callable[[], None] = lambda: None,
        objects: ObjectService | None = None,
    ):
        """`objects`: how reported objects are written (with the API lookup REST writes use, so a route check
        weighs the same APIs whichever door a write came in by)."""
        self.clusters = clusters
        self.store = clusters.store
        self.reported = reported
        self.cluster_objects = ClusterObjects(objects or ObjectService(self.store))

    async def _check_cluster(self, cluster: str, context: grpc.aio.ServicerContext) -> None:
        try:
            check_name(cluster)
        except ValueError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"cluster: {exc}")

    async def RegisterCluster(
        self, request: control_plane_pb2.RegisterClusterRequest, context: grpc.aio.ServicerContext
    ) -> control_plane_pb2.RegisterClusterResponse:
        await self._check_cluster(request.cluster, context)
        with acting_as(for_cluster(request.cluster, context.peer())):
            revision = await self.clusters.register(request.cluster, request.agent_version, dict(request.labels))
        return control_plane_pb2.RegisterClusterResponse(revision=revision)

    async def ReportStatus(
        self, request: control_plane_pb2.ReportStatusRequest, context: grpc.aio.ServicerContext
    ) -> control_plane_pb2.ReportResponse:
        await self._check_cluster(request.cluster, context)
        at = datetime.now(UTC)
        try:
            deliveries = [delivery_of(request.cluster, entry, at) for entry in request.deliveries]
        except ValueError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        applied = await self.store.record_deliveries(deliveries, request.idempotency_key or None)
        if applied:
            self.reported()
        self.clusters.seen(request.cluster)
        return control_plane_pb2.ReportResponse(duplicate=not applied)

    async def ReportObjects(
        self, request: control_plane_pb2.ReportObjectsRequest, context: grpc.aio.ServicerContext
    ) -> control_plane_pb2.ReportResponse:
        """Objects made in the cluster, published as far as the cluster may (see cluster_objects); the first one
        refused ends the call with its status, the ones before it kept."""
        await self._check_cluster(request.cluster, context)
        for local in request.objects:
            try:
                with acting_as(for_cluster(request.cluster, context.peer())):
                    await self.cluster_objects.keep(request.cluster, local)
            except ReportRefused as exc:
                REPORTS_REFUSED.labels(request.cluster, exc.reason).inc()
                log.warning("reported object refused", cluster=request.cluster, reason=exc.reason, error=str(exc))
                await context.abort(exc.code, str(exc))
        if request.idempotency_key:
            await self.store.claim_idempotency_key(request.idempotency_key)
        return control_plane_pb2.ReportResponse()

    async def ReportServices(
        self, request: control_plane_pb2.ReportServicesRequest, context: grpc.aio.ServicerContext
    ) -> control_plane_pb2.ReportResponse:
        """The cluster's services, kept as ServiceEndpoints of origin `cluster/<name>`. Every change a
        report makes is idempotent, so a retried one is applied again harmlessly and its key only tells."""
        await self._check_cluster(request.cluster, context)
        try:
            with acting_as(for_cluster(request.cluster, context.peer())):
                await apply_report(self.store, request.cluster, request)
        except InvalidObject as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"service report: {exc}")
        first = await self.store.claim_idempotency_key(request.idempotency_key) if request.idempotency_key else True
        return control_plane_pb2.ReportResponse(duplicate=not first)

    async def ReportFigures(
        self, request: control_plane_pb2.ReportFiguresRequest, context: grpc.aio.ServicerContext
    ) -> control_plane_pb2.ReportResponse:
        """The cluster's per-API figures. A report carries cumulative counts and the time they were read, so a
        retried one changes nothing a newer one wrote (see `Store.record_figures`): its key claims nothing."""
        await self._check_cluster(request.cluster, context)
        try:
            figures = figure_records(request, datetime.now(UTC))
        except ValueError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"figures report: {exc}")
        await self.store.record_figures(request.cluster, figures)
        self.clusters.seen(request.cluster)
        return control_plane_pb2.ReportResponse()
