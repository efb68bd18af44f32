"""The delta client against a scripted server, to pin down exactly what it puts on the wire."""

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest
from envoy.config.core.v3.base_pb2 import Node
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2

from meshplane.lifecycle import Backoff
from meshplane.xds.client import DeltaClient, DeltaUpdate, UpdateRejected
from meshplane_testing.xds_doubles import NUMBER, STRING, Signal, serve, text


class ScriptedAds(ads_pb2_grpc.AggregatedDiscoveryServiceServicer):
    """Records every request; sends whatever the test queues, or ends the stream with a status."""

    def __init__(self) -> None:
        self.requests: list[discovery_pb2.DeltaDiscoveryRequest] = []
        self.outbox: asyncio.Queue[discovery_pb2.DeltaDiscoveryResponse | grpc.StatusCode] = asyncio.Queue()
        self.streams = 0
        self.metadata: list[tuple[str, str]] = []
        self.signal = Signal()

    async def DeltaAggregatedResources(self, request_iterator, context) -> AsyncIterator:
        self.streams += 1
        self.metadata = [(item.key, item.value) for item in context.invocation_metadata()]
        self.signal.notify()
        reader = asyncio.create_task(self._record(request_iterator))
        try:
            while not isinstance(item := await self.outbox.get(), grpc.StatusCode):
                yield item
            await context.abort(item, "scripted failure")
        finally:
            reader.cancel()

    async def _record(self, requests) -> None:
        async for request in requests:
            self.requests.append(request)
            self.signal.notify()


def response(nonce: str, *resources, removed=(), type_url=STRING) -> discovery_pb2.DeltaDiscoveryResponse:
    entries = [discovery_pb2.Resource(name=r.name, version=r.version, resource=r.body) for r in resources]
    return discovery_pb2.DeltaDiscoveryResponse(
        type_url=type_url, nonce=nonce, resources=entries, removed_resources=removed
    )


class Owner:
    """What the client is wired to: local versions, an update sink that may refuse, a connect counter."""

    def __init__(self, refuse: Exception | None = None) -> None:
        self.local = {STRING: {"a": "v-a"}, NUMBER: {}}
        self.updates: list[DeltaUpdate] = []
        self.connects = 0
        self.refuse = refuse

    def initial_versions(self, type_url: str) -> dict[str, str]:
        return self.local[type_url]

    async def on_update(self, update: DeltaUpdate) -> None:
        self.updates.append(update)
        if self.refuse is not None:
            raise self.refuse

    async def on_connected(self) -> None:
        self.connects += 1


async def run_client(owner: Owner, port: int) -> tuple[DeltaClient, asyncio.Task]:
    client = DeltaClient(
        lambda: grpc.aio.insecure_channel(f"127.0.0.1:{port}"),
        Node(id="agent", cluster="g"),
        [STRING, NUMBER],
        initial_versions=owner.initial_versions,
        on_update=owner.on_update,
        on_connected=owner.on_connected,
        backoff=Backoff(initial=0.01, cap=0.05),
        metadata=[("x-token", "secret")],
    )
    return client, asyncio.create_task(client.run())


async def stop(task: asyncio.Task) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()


async def test_subscribes_to_each_type_once_with_what_it_holds_then_acks_in_order():
    ads, owner = ScriptedAds(), Owner()
    async with serve(lambda server: ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(ads, server)) as s:
        client, task = await run_client(owner, s.port)
        await ads.signal.until(lambda: len(ads.requests) == 2)
        subscribe_strings, subscribe_numbers = ads.requests
        assert subscribe_strings.node.id == "agent"
        assert not subscribe_numbers.HasField("node")
        assert [(r.type_url, list(r.resource_names_subscribe)) for r in ads.requests] == [
            (STRING, ["*"]),
            (NUMBER, ["*"]),
        ]
        assert dict(subscribe_strings.initial_resource_versions) == {"a": "v-a"}
        assert ("x-token", "secret") in ads.metadata
        assert not client.connected

        ads.outbox.put_nowait(response("n1", text("b"), removed=["a"]))
        ads.outbox.put_nowait(response("n2", text("c", "x"), type_url=NUMBER))
        await ads.signal.until(lambda: len(ads.requests) == 4)

        assert client.connected and owner.connects == 1
        assert [(u.type_url, [r.name for r in u.upserts], u.removed, u.nonce) for u in owner.updates] == [
            (STRING, ["b"], ["a"], "n1"),
            (NUMBER, ["c"], [], "n2"),
        ]
        assert [(r.type_url, r.response_nonce, r.HasField("error_detail")) for r in ads.requests[2:]] == [
            (STRING, "n1", False),
            (NUMBER, "n2", False),
        ]
        await stop(task)


@pytest.mark.parametrize(
    ("refusal", "message"),
    [(UpdateRejected("bad route"), "bad route"), (KeyError("x"), "'x'")],
    ids=["rejected", "crashed"],
)
async def test_refused_updates_are_nacked_with_invalid_argument_and_the_reason(refusal, message):
    ads = ScriptedAds()
    async with serve(lambda server: ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(ads, server)) as s:
        _, task = await run_client(Owner(refuse=refusal), s.port)
        ads.outbox.put_nowait(response("n1", text("b")))
        await ads.signal.until(lambda: any(r.response_nonce == "n1" for r in ads.requests))
        nack = next(r for r in ads.requests if r.response_nonce == "n1")
        assert (nack.error_detail.code, nack.error_detail.message) == (3, message)
        await stop(task)


async def test_reconnects_after_a_stream_error_reading_local_versions_afresh():
    ads, owner = ScriptedAds(), Owner()
    async with serve(lambda server: ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(ads, server)) as s:
        client, task = await run_client(owner, s.port)
        ads.outbox.put_nowait(response("n1", text("b")))
        await ads.signal.until(lambda: owner.connects == 1 and len(ads.requests) == 3)

        owner.local[STRING] = {"b": text("b").version}
        ads.outbox.put_nowait(grpc.StatusCode.UNAVAILABLE)
        await ads.signal.until(lambda: ads.streams == 2 and len(ads.requests) == 5)
        assert not client.connected
        assert dict(ads.requests[3].initial_resource_versions) == {"b": text("b").version}

        ads.outbox.put_nowait(response("n1", text("c")))
        await ads.signal.until(lambda: len(ads.requests) == 6)
        assert owner.connects == 2 and client.connected
        await stop(task)


async def test_keeps_retrying_while_the_server_is_down_and_cancels_cleanly():
    async with serve(lambda server: None) as gone:
        port = gone.port
    attempts = 0

    def channel() -> grpc.aio.Channel:
        nonlocal attempts
        attempts += 1
        return grpc.aio.insecure_channel(f"127.0.0.1:{port}")

    owner = Owner()
    client = DeltaClient(
        channel,
        Node(id="agent"),
        [STRING],
        initial_versions=owner.initial_versions,
        on_update=owner.on_update,
        backoff=Backoff(initial=0.01, cap=0.02),
    )
    task = asyncio.create_task(client.run())
    await asyncio.sleep(0.3)
    assert attempts > 3 and not task.done() and not client.connected
    await stop(task)


async def test_a_channel_the_factory_hands_out_again_is_reused_and_closed_only_at_the_end():
    ads, owner = ScriptedAds(), Owner()
    async with serve(lambda server: ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(ads, server)) as s:
        shared = grpc.aio.insecure_channel(f"127.0.0.1:{s.port}")
        client = DeltaClient(
            lambda: shared,
            Node(id="agent"),
            [STRING],
            initial_versions=owner.initial_versions,
            on_update=owner.on_update,
            backoff=Backoff(initial=0.01, cap=0.02),
        )
        task = asyncio.create_task(client.run())
        ads.outbox.put_nowait(grpc.StatusCode.UNAVAILABLE)
        ads.outbox.put_nowait(response("n1", text("b")))
        await ads.signal.until(lambda: ads.streams == 2 and any(r.response_nonce == "n1" for r in ads.requests))
        assert shared.get_state() != grpc.ChannelConnectivity.SHUTDOWN

        await stop(task)
        assert shared.get_state() == grpc.ChannelConnectivity.SHUTDOWN
