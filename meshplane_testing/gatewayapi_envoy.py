"""A real Envoy that serves what `program` gives, through the agent's publisher and xDS server, for the
Gateway API tests: started once per test module, each test publishing its own state."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

from google.protobuf.message import Message

from meshplane.agent.gateway import CLUSTER, ENDPOINT, LISTENER, ROUTE, GatewayPublisher
from meshplane.agent.translate import EnvoyConfig
from meshplane.agent.translate.gateways import SECRET_TYPE
from meshplane.gatewayapi.program import program
from meshplane.gatewayapi.state import GatewayApiState, Programmed
from meshplane.model.status import DeliveryState
from meshplane.xds.resource import pack
from meshplane_testing.envoy import EnvoyProcess, run_envoy
from meshplane_testing.gateway_xds import gateway_xds
from meshplane_testing.process import port_open


def envoy_config(programmed: Programmed) -> EnvoyConfig:
    resources = programmed.resources

    def named(type_url: str) -> list:
        return list(resources.get(type_url, {}).values())

    return EnvoyConfig(
        listeners=named(LISTENER),
        routes=named(ROUTE),
        clusters=named(CLUSTER),
        endpoints=named(ENDPOINT),
        secrets=named(SECRET_TYPE),
    )


class ProgrammedEnvoy:
    """Envoy, and the loop its xDS server runs on (a thread of its own, so sync tests can publish). Enforcers
    and rate limiters pointed at `xds_port` are fed what `set_services` gives them, as an agent's are."""

    def __init__(
        self, envoy: EnvoyProcess, publisher: GatewayPublisher, loop: asyncio.AbstractEventLoop, xds_port: int
    ):
        self.envoy, self.publisher, self.loop, self.xds_port = envoy, publisher, loop, xds_port

    def serve(self, state: GatewayApiState, address: str, port: int) -> Programmed:
        """Publish what the state programs and wait until the listener at address:port accepts connections."""
        programmed = program(state)
        self.publish(envoy_config(programmed), address, port)
        return programmed

    def publish(self, config: EnvoyConfig, address: str, port: int) -> None:
        """Publish a whole configuration and wait until the listener at address:port accepts connections."""
        outcome = asyncio.run_coroutine_threadsafe(self.publisher.publish(config), self.loop)
        published = outcome.result(timeout=30)
        assert published.state is DeliveryState.APPLIED, published.message
        self.envoy.process.wait_ready(lambda: port_open(port, address), 10.0, f"an Envoy listener on {address}:{port}")

    def set_services(self, group: str, resources: Mapping[str, Mapping[str, Message]]) -> None:
        """What the services of `group` (enforcers, rate limiters) are fed: type URL -> name -> message."""
        packed = {
            kind: {name: pack(name, message) for name, message in named.items()} for kind, named in resources.items()
        }
        self.loop.call_soon_threadsafe(self.publisher.cache.set_snapshot, group, packed)


@contextlib.contextmanager
def run_programmed_envoy(tmp_path: Path) -> Iterator[ProgrammedEnvoy]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="gatewayapi-xds", daemon=True)
    thread.start()
    started: asyncio.Future[tuple[GatewayPublisher, int]] = loop.create_future()
    stop = asyncio.Event()

    async def serve_xds() -> None:
        async with gateway_xds(ack_timeout=20) as (publisher, port):
            started.set_result((publisher, port))
            await stop.wait()

    task = asyncio.run_coroutine_threadsafe(serve_xds(), loop)
    try:
        publisher, xds_port = asyncio.run_coroutine_threadsafe(_wait(started), loop).result(timeout=30)
        with run_envoy(tmp_path, "gwapi", xds_port) as envoy:
            yield ProgrammedEnvoy(envoy, publisher, loop, xds_port)
    finally:
        loop.call_soon_threadsafe(stop.set)
        with contextlib.suppress(Exception):
            task.result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


async def _wait(future: asyncio.Future[tuple[GatewayPublisher, int]]) -> tuple[GatewayPublisher, int]:
    return await future
