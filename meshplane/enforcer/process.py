"""The enforcer process: the ext_authz server, fed by a delta ADS stream from the local agent."""

from __future__ import annotations

import asyncio

import grpc
from envoy.config.core.v3.base_pb2 import Node

from meshplane.callout_server import CalloutServer, serve_fed_callouts
from meshplane.dataplane import ENFORCER_NODE_CLUSTER, ENFORCER_TYPES
from meshplane.enforcer.service import AuthorizationService
from meshplane.enforcer.settings import EnforcerSettings
from meshplane.enforcer.state import EnforcerState
from meshplane.observability.logging import get_logger
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
    log.info(
        "enforcer serving",
        grpc=settings.grpc_address,
        xds=settings.xds_address,
        node=node.id,
        metrics=settings.metrics_address,
    )
    try:
        await serve_fed_callouts(
            "enforcer", server, settings.grpc_address, client, settings.metrics_address, stop, STOP_GRACE
        )
    finally:
        log.info("enforcer stopped")
