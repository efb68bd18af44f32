"""Every gRPC call the server answers is counted by method and status, and timed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from envoy.config.core.v3.base_pb2 import Node
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2

from meshplane.observability.grpc_metrics import MeasureCalls
from meshplane.proto.v1 import control_plane_pb2, control_plane_pb2_grpc
from meshplane.server.control_plane import ClusterRegistry, ControlPlaneService
from meshplane.store.store import Store
from meshplane.xds.cache import ResourceCache
from meshplane.xds.server import XdsServer, add_to_server
from meshplane_testing.eventually import eventually_async
from meshplane_testing.xds_doubles import STRING, by_cluster, text

from .support import sample

REGISTER = "/meshplane.v1.ControlPlane/RegisterCluster"
DELTA = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"


def calls(method: str, code: str) -> float:
    return sample("meshplane_grpc_requests_total", method=method, code=code)


def timings(method: str) -> float:
    return sample("meshplane_grpc_request_duration_seconds_count", method=method)


@pytest.fixture
async def channel(tmp_path: Path) -> AsyncIterator[grpc.aio.Channel]:
    """A channel to a server with the ControlPlane and ADS services behind the metrics interceptor."""
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}")
    cache = ResourceCache()
    cache.set_type("edge", STRING, {"a": text("a")})
    server = grpc.aio.server(interceptors=[MeasureCalls()])
    control_plane_pb2_grpc.add_ControlPlaneServicer_to_server(ControlPlaneService(ClusterRegistry(store)), server)
    add_to_server(XdsServer(cache, node_group=by_cluster, name="grpc-metrics-test"), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as opened:
            yield opened
    finally:
        await server.stop(None)
        await store.close()


async def test_unary_calls_are_counted_by_method_and_code_and_timed(channel: grpc.aio.Channel) -> None:
    stub = control_plane_pb2_grpc.ControlPlaneStub(channel)
    ok, invalid, timed = calls(REGISTER, "OK"), calls(REGISTER, "INVALID_ARGUMENT"), timings(REGISTER)

    await stub.RegisterCluster(control_plane_pb2.RegisterClusterRequest(cluster="edge-1"))
    with pytest.raises(grpc.aio.AioRpcError):
        await stub.RegisterCluster(control_plane_pb2.RegisterClusterRequest(cluster="Not A Name"))

    assert calls(REGISTER, "OK") - ok == 1
    assert calls(REGISTER, "INVALID_ARGUMENT") - invalid == 1
    assert timings(REGISTER) - timed == 2


async def test_a_stream_is_counted_when_it_ends_with_how_it_ended(channel: grpc.aio.Channel) -> None:
    cancelled = calls(DELTA, "CANCELLED")
    call = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).DeltaAggregatedResources()
    await call.write(discovery_pb2.DeltaDiscoveryRequest(node=Node(id="agent", cluster="edge"), type_url=STRING))
    await asyncio.wait_for(call.read(), 2)
    assert calls(DELTA, "CANCELLED") == cancelled  # still open: not counted yet

    call.cancel()

    await eventually_async(
        lambda: calls(DELTA, "CANCELLED") - cancelled == 1, timeout=2.0
    )  # the server learns of it a moment later


async def test_a_method_nobody_serves_is_not_a_label(channel: grpc.aio.Channel) -> None:
    made_up = "/made.up.Service/Anything"
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await channel.unary_unary(made_up)(b"")

    assert refused.value.code() is grpc.StatusCode.UNIMPLEMENTED
    assert timings(made_up) == 0
