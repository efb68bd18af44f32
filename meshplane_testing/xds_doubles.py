"""Test doubles for xDS tests: servers on loopback, recording agents and callbacks, raw streams."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc
from envoy.config.core.v3.base_pb2 import Node
from google.protobuf import wrappers_pb2

from meshplane.lifecycle import Backoff
from meshplane.xds.client import DeltaClient, DeltaUpdate, UpdateRejected
from meshplane.xds.resource import VersionedResource, pack, type_url_of
from meshplane.xds.server import NoCallbacks, XdsServer, add_to_server

STRING = type_url_of(wrappers_pb2.StringValue)
NUMBER = type_url_of(wrappers_pb2.Int64Value)
QUIET = 0.3  # how long "nothing more arrives" is watched for
PATIENCE = 2.0  # how long anything expected may take to arrive


def text(name: str, value: str | None = None) -> VersionedResource:
    return pack(name, wrappers_pb2.StringValue(value=name if value is None else value))


def number(name: str, value: int) -> VersionedResource:
    return pack(name, wrappers_pb2.Int64Value(value=value))


def versions(*resources: VersionedResource) -> dict[str, str]:
    return {res.name: res.version for res in resources}


def by_cluster(node: Node, context: grpc.aio.ServicerContext) -> str:
    return node.cluster


class Signal:
    """Lets a test wait for a condition that some callback makes true."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        self._event.set()

    async def until(self, condition: Callable[[], bool]) -> None:
        async with asyncio.timeout(PATIENCE):
            while not condition():
                self._event.clear()
                await self._event.wait()


@dataclass
class Served:
    server: grpc.aio.Server
    port: int

    def channel(self) -> grpc.aio.Channel:
        return grpc.aio.insecure_channel(f"127.0.0.1:{self.port}")


@asynccontextmanager
async def serve(register: Callable[[grpc.aio.Server], None]) -> AsyncIterator[Served]:
    server = grpc.aio.server()
    register(server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield Served(server, port)
    finally:
        await server.stop(None)


@asynccontextmanager
async def serve_xds(xds: XdsServer) -> AsyncIterator[Served]:
    async with serve(lambda server: add_to_server(xds, server)) as served:
        yield served


@dataclass
class Recorder(NoCallbacks):
    """Callbacks that remember every call."""

    opened: list[tuple[str, str, bool]] = field(default_factory=list)
    closed: list[tuple[str, str]] = field(default_factory=list)
    acks: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    nacks: list[tuple[str, str, dict[str, str], str]] = field(default_factory=list)
    signal: Signal = field(default_factory=Signal)

    async def on_stream_open(self, node: Node, group: str, delta: bool) -> None:
        self.opened.append((node.id, group, delta))
        self.signal.notify()

    async def on_stream_close(self, node: Node, group: str) -> None:
        self.closed.append((node.id, group))
        self.signal.notify()

    async def on_ack(self, group: str, node: Node, type_url: str, versions: Mapping[str, str]) -> None:
        self.acks.append((group, type_url, dict(versions)))
        self.signal.notify()

    async def on_nack(self, group: str, node: Node, type_url: str, versions: Mapping[str, str], message: str) -> None:
        self.nacks.append((group, type_url, dict(versions), message))
        self.signal.notify()


class Agent:
    """A delta client that keeps what it receives, the way an agent would."""

    def __init__(
        self,
        served: Served,
        group: str,
        type_urls: tuple[str, ...] = (STRING,),
        *,
        held: Mapping[str, Mapping[str, str]] | None = None,
        reject: Callable[[DeltaUpdate], str | None] = lambda update: None,
    ) -> None:
        self.held: dict[str, dict[str, str]] = defaultdict(dict)
        for type_url, known in (held or {}).items():
            self.held[type_url].update(known)
        self.updates: list[DeltaUpdate] = []
        self.connects = 0
        self.signal = Signal()
        self._reject = reject
        self.client = DeltaClient(
            served.channel,
            Node(id=f"agent-{group}", cluster=group),
            type_urls,
            initial_versions=lambda type_url: dict(self.held[type_url]),
            on_update=self._on_update,
            on_connected=self._on_connected,
            backoff=Backoff(initial=0.01, cap=0.05),
        )

    @property
    def sent(self) -> int:
        """How many resources the server has sent this agent."""
        return sum(len(update.upserts) for update in self.updates)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Agent]:
        task = asyncio.create_task(self.client.run())
        try:
            yield self
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def until(self, condition: Callable[[], bool]) -> None:
        await self.signal.until(condition)

    async def silent(self) -> bool:
        """True if no update arrives for a while."""
        count = len(self.updates)
        await asyncio.sleep(QUIET)
        return len(self.updates) == count

    async def _on_update(self, update: DeltaUpdate) -> None:
        self.updates.append(update)
        self.signal.notify()
        if (message := self._reject(update)) is not None:
            raise UpdateRejected(message)
        held = self.held[update.type_url]
        for resource in update.upserts:
            held[resource.name] = resource.version
        for name in update.removed:
            held.pop(name, None)

    async def _on_connected(self) -> None:
        self.connects += 1
        self.signal.notify()


class RawStream:
    """A bidirectional call driven by hand: write requests, read responses with timeouts."""

    def __init__(self, call: Any) -> None:
        self.call = call
        self.received: asyncio.Queue[Any] = asyncio.Queue()
        self._reader = asyncio.create_task(self._read())

    async def send(self, request: Any) -> None:
        await self.call.write(request)

    async def recv(self) -> Any:
        response = await asyncio.wait_for(self.received.get(), PATIENCE)
        if isinstance(response, BaseException):
            raise response
        return response

    async def silent(self) -> bool:
        """True if nothing arrives for a while."""
        await asyncio.sleep(QUIET)
        return self.received.empty()

    async def close(self) -> None:
        self.call.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)

    async def _read(self) -> None:
        try:
            while (response := await self.call.read()) is not grpc.aio.EOF:
                await self.received.put(response)
        except grpc.aio.AioRpcError as exc:
            await self.received.put(exc)
