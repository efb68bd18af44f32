from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3.base_pb2 import Node
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.rpc import status_pb2

from meshplane.xds.cache import ResourceCache
from meshplane.xds.resource import VersionedResource, pack, type_url_of
from meshplane.xds.server import XdsServer
from meshplane_testing.xds_doubles import RawStream, Recorder, by_cluster, serve_xds, versions

CDS = type_url_of(cluster_pb2.Cluster)
EDS = type_url_of(endpoint_pb2.ClusterLoadAssignment)
LDS = type_url_of(listener_pb2.Listener)
RDS = type_url_of(route_pb2.RouteConfiguration)
NODE = Node(id="envoy-1", cluster="g")


def cluster(name: str, seconds: int = 1) -> VersionedResource:
    message = cluster_pb2.Cluster(name=name)
    message.connect_timeout.seconds = seconds
    return pack(name, message)


def listener(name: str, port: int = 8080) -> VersionedResource:
    message = listener_pb2.Listener(name=name)
    message.address.socket_address.port_value = port
    return pack(name, message)


def route(name: str, host: str = "*") -> VersionedResource:
    return pack(name, route_pb2.RouteConfiguration(name=name, virtual_hosts=[{"name": host, "domains": [host]}]))


def request(type_url: str, *names: str, nonce: str = "", version: str = "", **fields) -> discovery_pb2.DiscoveryRequest:
    return discovery_pb2.DiscoveryRequest(
        type_url=type_url, resource_names=names, response_nonce=nonce, version_info=version, **fields
    )


def ack(response: discovery_pb2.DiscoveryResponse, *names: str) -> discovery_pb2.DiscoveryRequest:
    return request(response.type_url, *names, nonce=response.nonce, version=response.version_info)


MESSAGES = {CDS: cluster_pb2.Cluster, LDS: listener_pb2.Listener, RDS: route_pb2.RouteConfiguration}


def names(response: discovery_pb2.DiscoveryResponse) -> list[str]:
    message_type = MESSAGES[response.type_url]
    return sorted(message_type.FromString(resource.value).name for resource in response.resources)


@asynccontextmanager
async def envoy(
    cache: ResourceCache, recorder: Recorder | None = None, type_order: tuple[str, ...] = (CDS, EDS, LDS, RDS)
) -> AsyncIterator[RawStream]:
    """An Envoy-like SotW ADS stream to a server with (by default) make-before-break type order."""
    xds = XdsServer(cache, node_group=by_cluster, type_order=type_order, callbacks=recorder)
    async with serve_xds(xds) as served, served.channel() as channel:
        stream = RawStream(ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).StreamAggregatedResources())
        try:
            yield stream
        finally:
            await stream.close()


def snapshot(generation: int) -> dict[str, dict[str, VersionedResource]]:
    return {
        CDS: {"c1": cluster("c1", generation)},
        LDS: {"l1": listener("l1", 8000 + generation)},
        RDS: {"r1": route("r1", f"v{generation}"), "r2": route("r2", f"v{generation}")},
    }


@pytest.mark.parametrize(
    ("type_order", "expected"),
    [((CDS, EDS, LDS, RDS), [CDS, LDS, RDS]), ((RDS, CDS), [RDS, CDS, LDS])],
    ids=["make-before-break", "unlisted-types-last"],
)
async def test_a_snapshot_change_arrives_in_type_order(type_order, expected):
    cache = ResourceCache()
    cache.set_snapshot("g", snapshot(1))

    async with envoy(cache, type_order=type_order) as stream:
        await stream.send(request(LDS, node=NODE))
        await stream.send(request(RDS, "r1"))
        await stream.send(request(CDS))
        for _ in range(3):
            response = await stream.recv()
            await stream.send(ack(response, *(["r1"] if response.type_url == RDS else [])))
        assert await stream.silent()

        cache.set_snapshot("g", snapshot(2))

        responses = [await stream.recv() for _ in range(3)]
        assert [r.type_url for r in responses] == expected
        assert {r.type_url: names(r) for r in responses} == {CDS: ["c1"], LDS: ["l1"], RDS: ["r1"]}


async def test_ack_and_nack_and_no_resend_of_a_rejected_version():
    cache = ResourceCache()
    cache.set_type("g", CDS, {"c1": cluster("c1")})
    recorder = Recorder()

    async with envoy(cache, recorder) as stream:
        await stream.send(request(CDS, node=NODE))
        first = await stream.recv()
        assert first.version_info == cache.version("g", CDS)
        assert first.nonce
        await stream.send(ack(first))
        await recorder.signal.until(lambda: bool(recorder.acks))
        assert recorder.acks == [("g", CDS, versions(cluster("c1")))]

        cache.update("g", CDS, upserts=[cluster("c2")])
        second = await stream.recv()
        assert names(second) == ["c1", "c2"]
        await stream.send(
            request(
                CDS, nonce=second.nonce, version=first.version_info, error_detail=status_pb2.Status(message="no c2")
            )
        )
        await recorder.signal.until(lambda: bool(recorder.nacks))
        # c1 came again only because a set is sent whole: the client holds it still, only c2 is refused.
        assert recorder.nacks == [("g", CDS, versions(cluster("c2")), "no c2")]
        assert await stream.silent()

        cache.update("g", CDS, upserts=[cluster("c2", 5)])
        third = await stream.recv()
        assert third.version_info not in (first.version_info, second.version_info)


async def test_a_nacked_first_set_is_refused_whole():
    cache = ResourceCache()
    cache.set_type("g", CDS, {"c1": cluster("c1"), "c2": cluster("c2")})
    recorder = Recorder()

    async with envoy(cache, recorder) as stream:
        await stream.send(request(CDS, node=NODE))
        first = await stream.recv()
        await stream.send(request(CDS, nonce=first.nonce, error_detail=status_pb2.Status(message="no")))
        await recorder.signal.until(lambda: bool(recorder.nacks))
        assert recorder.nacks == [("g", CDS, versions(cluster("c1"), cluster("c2")), "no")]


async def test_routes_are_sent_by_name_and_resent_when_the_names_change():
    cache = ResourceCache()
    cache.set_snapshot("g", snapshot(1))
    recorder = Recorder()

    async with envoy(cache, recorder) as stream:
        await stream.send(request(RDS, "r1", node=NODE))
        response = await stream.recv()
        assert names(response) == ["r1"]
        await stream.send(ack(response, "r1"))

        cache.update("g", RDS, upserts=[route("r2", "other"), route("r3")])  # none of them requested
        assert await stream.silent()

        await stream.send(ack(response, "r1", "r3"))
        response = await stream.recv()
        assert names(response) == ["r1", "r3"]
        await stream.send(ack(response, "r1", "r3"))
        await stream.send(ack(response, "r3"))  # same nonce again, only to change names
        assert names(await stream.recv()) == ["r3"]
        await recorder.signal.until(lambda: len(recorder.acks) == 2)
        assert [versions for _, _, versions in recorder.acks] == [
            {"r1": route("r1", "v1").version},
            {"r1": route("r1", "v1").version, "r3": route("r3").version},
        ]


async def test_a_request_with_a_stale_nonce_is_ignored():
    cache = ResourceCache()
    cache.set_type("g", CDS, {"c1": cluster("c1")})
    recorder = Recorder()

    async with envoy(cache, recorder) as stream:
        await stream.send(request(CDS, node=NODE))
        first = await stream.recv()
        cache.update("g", CDS, upserts=[cluster("c2")])
        second = await stream.recv()

        await stream.send(ack(first))  # answers a response that has since been superseded
        assert await stream.silent()
        assert recorder.acks == []

        await stream.send(ack(second))
        await recorder.signal.until(lambda: len(recorder.acks) == 1)
        assert recorder.acks[0][2] == versions(cluster("c1"), cluster("c2"))


async def test_a_reconnecting_client_that_is_current_gets_nothing_new():
    cache = ResourceCache()
    cache.set_type("g", CDS, {"c1": cluster("c1")})

    async with envoy(cache) as stream:
        await stream.send(request(CDS, node=NODE, version=cache.version("g", CDS)))
        assert await stream.silent()
        cache.update("g", CDS, upserts=[cluster("c2")])
        assert names(await stream.recv()) == ["c1", "c2"]
