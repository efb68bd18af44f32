"""The enforcer process: the ext_authz server, fed by a delta ADS stream from the local agent."""

from __future__ import annotations

import asyncio
import contextlib

import grpc
from envoy.config.core.v3.base_pb2 import Node

from meshplane.callout_server import CalloutServer
from meshplane.dataplane import ENFORCER_NODE_CLUSTER, ENFORCER_TYPES
from meshplane.enforcer.service import AuthorizationService
from meshplane.enforcer.settings import EnforcerSettings
from meshplane.enforcer.state import EnforcerState
from meshplane.observability.logging import get_logger
from meshplane.observability.metrics import serving_metrics
from meshplane.xds.client import RECONNECT_CHANNEL_OPTIONS, DeltaClient

log = get_logger("meshplane.enforcer")

STOP_GRACE = 1.0
"""Seconds in-flight checks get to finish once asked to stop."""


async def run_enforcer(settings: EnforcerSettings, stop: asyncio.Event) -> None:
    """Answer checks until `stop` is set. Until the agent first answers, every check is refused (no
    API is known); once it has, the last configuration it sent stays in force while it is away."""
    state = EnforcerState()
    node = Node(id=settings.node_id, cluster=ENFORCER_NODE_CLUSTER)
    server = CalloutServer(AuthorizationService(lambda: state.snapshot).methods())

    async def connected() -> None:
        log.info("connected to the agent", xds=settings.xds_address)

    client = DeltaClient(
        # A new channel per attempt (the client closes the old one): gRPC's own reconnect backoff, up to
        # minutes, must not delay the return to an agent that is back.
        lambda: grpc.aio.insecure_channel(settings.xds_address, options=RECONNECT_CHANNEL_OPTIONS),
        node,
        ENFORCER_TYPES,
        initial_versions=state.versions,
        on_update=state.apply,
        on_connected=connected,
    )
    with serving_metrics(settings.metrics_address, STOP_GRACE):
        await server.start(settings.grpc_address)
        log.info(
            "enforcer serving",
            grpc=settings.grpc_address,
            xds=settings.xds_address,
            node=node.id,
            metrics=settings.metrics_address,
        )
        feed = asyncio.create_task(client.run(), name="enforcer-xds")
        stopped = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait((feed, stopped), return_when=asyncio.FIRST_COMPLETED)
            if feed.done():
                feed.result()  # the feed never ends by itself; if it did, say why
        finally:
            for task in (feed, stopped):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await server.stop(STOP_GRACE)
            log.info("enforcer stopped")
