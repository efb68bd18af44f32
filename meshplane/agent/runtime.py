"""The agent process: local state, sync from the control plane, translation, and the gateways' xDS."""

from __future__ import annotations

import asyncio
import contextlib
import random

import grpc
from envoy.config.core.v3 import base_pb2
from google.protobuf import any_pb2

from meshplane import __version__
from meshplane.agent.gateway import ENVOY_TYPE_ORDER, GatewayPublisher, gateway_group
from meshplane.agent.state import HeldResource, LocalState
from meshplane.agent.translate import GatewaySettings, translate_apis
from meshplane.config import AgentSettings, split_address
from meshplane.model.registry import REGISTRY
from meshplane.model.resource import InvalidObject, Resource
from meshplane.model.wire import from_message
from meshplane.observability.logging import get_logger
from meshplane.observability.metrics import AGENT_UPDATES
from meshplane.proto.v1 import control_plane_pb2, control_plane_pb2_grpc
from meshplane.xds.cache import ResourceCache
from meshplane.xds.client import DeltaClient, DeltaUpdate, UpdateRejected
from meshplane.xds.server import XdsServer, add_to_server

log = get_logger("meshplane.agent")

API_TYPE = REGISTRY.get("API").type_url


def decode(type_url: str, body: bytes) -> Resource:
    """A delivered message back to its validated model (InvalidObject / DecodeError on bad input)."""
    info = REGISTRY.by_type_url(type_url)
    message = info.message()  # type: ignore[misc]
    message.ParseFromString(body)
    return from_message(info, message)


class Agent:
    def __init__(
        self,
        settings: AgentSettings,
        channel_credentials: grpc.ChannelCredentials | None = None,
    ):
        self.settings = settings
        self.channel_credentials = channel_credentials
        self.gateway_cache = ResourceCache()
        self.publisher = GatewayPublisher(self.gateway_cache)
        gw_host, gw_port = split_address(settings.gateway_address)
        self.gateway_settings = GatewaySettings(listener_address=gw_host, listener_port=gw_port)
        self.objects: dict[str, dict[str, Resource]] = {}
        self.state: LocalState | None = None
        self._channel: grpc.aio.Channel | None = None

    def _open_channel(self) -> grpc.aio.Channel:
        options = [("grpc.keepalive_time_ms", 20_000), ("grpc.keepalive_timeout_ms", 10_000)]
        if self.channel_credentials is None:
            return grpc.aio.insecure_channel(self.settings.server, options=options)
        return grpc.aio.secure_channel(self.settings.server, self.channel_credentials, options=options)

    async def _load_state(self) -> LocalState:
        state = await LocalState.open(self.settings.state_dir)
        for info in REGISTRY.delivered():
            held = self.objects.setdefault(info.type_url, {})
            for name, resource in state.resources(info.type_url).items():
                try:
                    held[name] = decode(info.type_url, resource.body)
                except (InvalidObject, ValueError) as exc:
                    log.error("held resource no longer validates; skipped", name=name, error=str(exc))
        return state

    async def rebuild(self) -> None:
        """Translate everything held into Envoy config and publish it to the gateways."""
        apis = self.objects.get(API_TYPE, {}).values()
        await self.publisher.publish(translate_apis(apis, self.gateway_settings))

    async def apply_update(self, update: DeltaUpdate) -> None:
        """Validate a whole delta before keeping any of it: a bad resource NACKs the response."""
        assert self.state is not None
        decoded: dict[str, Resource] = {}
        upserts = []
        for resource in update.upserts:
            message_bytes = _unpack(resource.resource, update.type_url)
            try:
                decoded[resource.name] = decode(update.type_url, message_bytes)
            except (InvalidObject, ValueError, KeyError) as exc:
                AGENT_UPDATES.labels("rejected").inc()
                raise UpdateRejected(f"{resource.name}: {exc}") from None
            upserts.append(HeldResource(resource.name, resource.version, message_bytes))
        await self.state.apply(update.type_url, upserts, update.removed)
        held = self.objects.setdefault(update.type_url, {})
        held.update(decoded)
        for name in update.removed:
            held.pop(name, None)
        AGENT_UPDATES.labels("applied").inc()
        log.info(
            "update applied", type=update.type_url.rsplit(".", 1)[-1], upserts=len(upserts), removed=len(update.removed)
        )
        await self.rebuild()

    async def register(self) -> None:
        """Announce this cluster until the server answers; the gateways keep serving meanwhile."""
        delay = 0.2
        while True:
            try:
                assert self._channel is not None
                stub = control_plane_pb2_grpc.ControlPlaneStub(self._channel)
                response = await stub.RegisterCluster(
                    control_plane_pb2.RegisterClusterRequest(
                        cluster=self.settings.cluster, agent_version=__version__, labels=self.settings.labels
                    ),
                    timeout=5,
                )
                log.info("registered with the control plane", revision=response.revision)
                return
            except grpc.aio.AioRpcError as exc:
                log.warning("control plane unreachable; retrying", code=exc.code().name, retry_in=round(delay, 2))
                await asyncio.sleep(delay * random.uniform(0.8, 1.2))
                delay = min(delay * 2, 10.0)

    async def sync(self) -> None:
        assert self.state is not None
        state = self.state
        await self.register()
        client = DeltaClient(
            lambda: self._channel,  # type: ignore[arg-type,return-value]
            base_pb2.Node(id=self.settings.cluster, cluster=self.settings.cluster),
            [info.type_url for info in REGISTRY.delivered()],
            initial_versions=state.versions,
            on_update=self.apply_update,
        )
        await client.run()

    async def run(self, stop: asyncio.Event) -> None:
        self.state = await self._load_state()
        await self.rebuild()
        xds = grpc.aio.server()
        add_to_server(
            XdsServer(
                self.gateway_cache,
                node_group=gateway_group,
                type_order=ENVOY_TYPE_ORDER,
                callbacks=self.publisher,
                name="gateway",
            ),
            xds,
        )
        xds.add_insecure_port(self.settings.xds_address)
        await xds.start()
        log.info(
            "agent serving gateways",
            cluster=self.settings.cluster,
            xds=self.settings.xds_address,
            held=sum(len(v) for v in self.objects.values()),
        )
        self._channel = self._open_channel()
        sync_task = asyncio.create_task(self.sync(), name="cp-sync")
        try:
            done, _ = await asyncio.wait(
                [asyncio.create_task(stop.wait()), sync_task], return_when=asyncio.FIRST_COMPLETED
            )
            if sync_task in done and sync_task.exception() is not None:
                raise sync_task.exception()  # type: ignore[misc]
        finally:
            sync_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await sync_task
            await xds.stop(grace=0.5)
            await self._channel.close()
            await self.state.close()


def _unpack(body: any_pb2.Any, type_url: str) -> bytes:
    if body.type_url != type_url:
        raise UpdateRejected(f"resource of type {body.type_url} in a {type_url} response")
    return body.value
