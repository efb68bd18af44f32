"""A stand-in agent for sync tests: the project's own delta client, recording every update it gets."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc
from envoy.config.core.v3 import base_pb2

from meshplane.model.registry import REGISTRY
from meshplane.proto.v1 import control_plane_pb2, control_plane_pb2_grpc
from meshplane.xds.client import DeltaClient, DeltaUpdate

API_TYPE = REGISTRY.get("API").type_url


@dataclass
class SyncProbe:
    """Holds name -> version per type like an agent would, starting from `held`.

    `credentials` (e.g. `ServerProcess.agent_credentials(cluster)`) make it dial over TLS.
    """

    server: str
    cluster: str
    held: dict[str, dict[str, str]] = field(default_factory=dict)
    updates: list[DeltaUpdate] = field(default_factory=list)
    credentials: grpc.ChannelCredentials | None = None

    def channel(self) -> grpc.aio.Channel:
        if self.credentials is None:
            return grpc.aio.insecure_channel(self.server)
        return grpc.aio.secure_channel(self.server, self.credentials)

    async def register(self, labels: dict[str, str] | None = None) -> None:
        async with self.channel() as channel:
            stub = control_plane_pb2_grpc.ControlPlaneStub(channel)
            await stub.RegisterCluster(
                control_plane_pb2.RegisterClusterRequest(cluster=self.cluster, labels=labels or {}), timeout=10
            )

    async def _apply(self, update: DeltaUpdate) -> None:
        self.updates.append(update)
        held = self.held.setdefault(update.type_url, {})
        held.update({r.name: r.version for r in update.upserts})
        for name in update.removed:
            held.pop(name, None)

    async def sync_until(self, done: Callable[[SyncProbe], bool], seconds: float = 10.0) -> None:
        """Connect with what is held, take updates until `done` holds, then disconnect."""
        channel = self.channel()
        client = DeltaClient(
            lambda: channel,
            base_pb2.Node(id=self.cluster),
            [info.type_url for info in REGISTRY.delivered()],
            initial_versions=lambda type_url: dict(self.held.get(type_url, {})),
            on_update=self._apply,
        )
        task = asyncio.create_task(client.run())
        try:
            async with asyncio.timeout(seconds):
                while not (client.connected and done(self)):
                    if task.done():
                        task.result()
                    await asyncio.sleep(0.02)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await channel.close()

    def names(self, type_url: str = API_TYPE) -> set[str]:
        return set(self.held.get(type_url, {}))
