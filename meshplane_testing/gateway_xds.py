"""The agent's gateway publisher and xDS server in the test's own process, for tests that hand Envoy a
translation directly (no server, no agent process)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import grpc

from meshplane.agent.gateway import ENVOY_TYPE_ORDER, GatewayPublisher, gateway_group
from meshplane.xds.cache import ResourceCache
from meshplane.xds.server import XdsServer, add_to_server


@contextlib.asynccontextmanager
async def gateway_xds(ack_timeout: float = 30.0) -> AsyncIterator[tuple[GatewayPublisher, int]]:
    """A publisher and the port of the xDS server Envoys fetch its configuration from; stopped after."""
    cache = ResourceCache()
    publisher = GatewayPublisher(cache, ack_timeout=ack_timeout)
    server = grpc.aio.server()
    add_to_server(XdsServer(cache, node_group=gateway_group, type_order=ENVOY_TYPE_ORDER, callbacks=publisher), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield publisher, port
    finally:
        await server.stop(None)
