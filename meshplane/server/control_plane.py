"""`meshplane.v1.ControlPlane`: the unary calls agents make up to the server."""

from __future__ import annotations

from datetime import UTC, datetime

import grpc

from meshplane.model.meta import check_name
from meshplane.observability.logging import get_logger
from meshplane.proto.v1 import control_plane_pb2, control_plane_pb2_grpc
from meshplane.store.errors import AlreadyExists, NotFound
from meshplane.store.store import Store

log = get_logger("meshplane.server.control_plane")


def now() -> str:
    return datetime.now(UTC).isoformat()


class ClusterRegistry:
    """Cluster objects as agents see them: created on first contact, presence kept in status."""

    def __init__(self, store: Store):
        self.store = store

    async def register(self, cluster: str, agent_version: str, labels: dict[str, str]) -> int:
        """Create the cluster with the agent's labels if it is new; labels of a known cluster are the
        operator's and are left alone."""
        try:
            await self.store.create("Cluster", "", cluster, spec={}, labels=labels)
            log.info("cluster registered", cluster=cluster, agent_version=agent_version)
        except AlreadyExists:
            pass
        await self.update_status(cluster, agentVersion=agent_version, lastSeen=now())
        return await self.store.current_revision()

    async def update_status(self, cluster: str, **fields: object) -> None:
        try:
            current = await self.store.get("Cluster", "", cluster)
        except NotFound:
            return
        status = {**current.status, **fields}
        if status != current.status:
            await self.store.set_status("Cluster", "", cluster, status)


class ControlPlaneService(control_plane_pb2_grpc.ControlPlaneServicer):
    def __init__(self, clusters: ClusterRegistry):
        self.clusters = clusters

    async def RegisterCluster(
        self, request: control_plane_pb2.RegisterClusterRequest, context: grpc.aio.ServicerContext
    ) -> control_plane_pb2.RegisterClusterResponse:
        try:
            check_name(request.cluster)
        except ValueError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"cluster: {exc}")
        revision = await self.clusters.register(request.cluster, request.agent_version, dict(request.labels))
        return control_plane_pb2.RegisterClusterResponse(revision=revision)
