"""The management server process: store, projection, sync gRPC and the north REST API together."""

from __future__ import annotations

import asyncio
import contextlib

import grpc
import uvicorn
from envoy.config.core.v3 import base_pb2

from meshplane.config import ServerSettings, split_address
from meshplane.model.meta import check_name
from meshplane.observability.logging import get_logger
from meshplane.proto.v1 import control_plane_pb2_grpc
from meshplane.server.app import create_app
from meshplane.server.control_plane import ClusterRegistry, ControlPlaneService, now
from meshplane.server.projection import FleetProjection
from meshplane.server.sync import ProjectionFeeder
from meshplane.store.errors import AlreadyExists
from meshplane.store.store import Store
from meshplane.xds.cache import ResourceCache
from meshplane.xds.server import NoCallbacks, XdsServer, add_to_server

log = get_logger("meshplane.server")

DEFAULT_PROJECT = "default"


def cluster_of_node(node: base_pb2.Node, context: grpc.aio.ServicerContext) -> str:
    """The cache group of an agent's stream: its cluster, named by the node id."""
    try:
        return check_name(node.id)
    except ValueError as exc:
        raise PermissionError(f"node id: {exc}") from None


class ClusterPresence(NoCallbacks):
    """Marks clusters connected while their agent holds a sync stream."""

    def __init__(self, clusters: ClusterRegistry):
        self.clusters = clusters
        self.streams: dict[str, int] = {}

    async def on_stream_open(self, node: base_pb2.Node, group: str, delta: bool) -> None:
        self.streams[group] = self.streams.get(group, 0) + 1
        await self.clusters.update_status(group, connected=True, lastSeen=now())

    async def on_stream_close(self, node: base_pb2.Node, group: str) -> None:
        self.streams[group] = self.streams.get(group, 1) - 1
        if self.streams[group] <= 0:
            self.streams.pop(group, None)
            await self.clusters.update_status(group, connected=False, lastSeen=now())


async def ensure_default_project(store: Store) -> None:
    """A fresh server has a `default` project, as a fresh Kubernetes has a `default` namespace."""
    if await store.current_revision() == 0:
        with contextlib.suppress(AlreadyExists):
            await store.create("Project", "", DEFAULT_PROJECT, spec={"description": "Default project"})


async def run_server(
    settings: ServerSettings,
    stop: asyncio.Event,
    grpc_credentials: grpc.ServerCredentials | None = None,
) -> None:
    """Serve until `stop` is set, then shut everything down in order."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    store = await Store.open(settings.store_url)
    await ensure_default_project(store)
    cache = ResourceCache()
    projection = FleetProjection(cache)
    feeder = ProjectionFeeder(store, projection)
    clusters = ClusterRegistry(store)

    grpc_server = grpc.aio.server()
    add_to_server(
        XdsServer(cache, node_group=cluster_of_node, callbacks=ClusterPresence(clusters), name="sync"), grpc_server
    )
    control_plane_pb2_grpc.add_ControlPlaneServicer_to_server(ControlPlaneService(clusters), grpc_server)
    if grpc_credentials is None:
        grpc_server.add_insecure_port(settings.grpc_address)
    else:
        grpc_server.add_secure_port(settings.grpc_address, grpc_credentials)

    app = create_app(store, ready=feeder.ready.is_set)
    app.state.projection = projection
    host, port = split_address(settings.http_address)
    http = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False, lifespan="off"))
    http.install_signal_handlers = lambda: None  # type: ignore[method-assign]

    feeder_task = asyncio.create_task(feeder.run(), name="projection-feeder")
    await asyncio.wait([asyncio.create_task(feeder.ready.wait()), feeder_task], return_when=asyncio.FIRST_COMPLETED)
    if feeder_task.done():
        await store.close()
        feeder_task.result()
    await grpc_server.start()
    http_task = asyncio.create_task(http.serve(), name="north-api")
    log.info("server started", http=settings.http_address, grpc=settings.grpc_address, store=store.dialect)
    try:
        done, _ = await asyncio.wait(
            [asyncio.create_task(stop.wait()), feeder_task, http_task], return_when=asyncio.FIRST_COMPLETED
        )
        for task in done:
            if task is not None and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
    finally:
        log.info("server stopping")
        http.should_exit = True
        await grpc_server.stop(grace=1.0)
        feeder_task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await feeder_task
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(http_task, timeout=5)
        await store.close()
