"""`meshplane enforcer` as a process: fed over delta ADS by an xDS server in the test, asked by Envoy's
ext_authz protocol over real gRPC, stopped with SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import grpc
from envoy.config.core.v3.base_pb2 import Node
from envoy.service.auth.v3 import external_auth_pb2, external_auth_pb2_grpc
from google.rpc import code_pb2

from meshplane.dataplane import ENFORCER_APPLICATION_TYPE, ENFORCER_NODE_CLUSTER
from meshplane.proto.v1 import enforcer_pb2
from meshplane.xds.cache import ResourceCache
from meshplane.xds.resource import VersionedResource, pack
from meshplane.xds.server import XdsServer, add_to_server
from meshplane_testing.enforcer_factories import api, application, by_type, check_request, key, subscription
from meshplane_testing.eventually import eventually_async
from meshplane_testing.meshplane import MESHPLANE
from meshplane_testing.metrics import Scrape, scrape
from meshplane_testing.process import Process, free_port, port_open, running
from meshplane_testing.xds_doubles import Recorder

GROUP = "enforcers"
NODE_ID = "enforcer-under-test"
PATIENCE = 15.0
"""Seconds anything expected of the enforcer may take."""

FLEET = (
    api("shop/orders", header="x-api-key", query="api_key"),
    application("shop/mobile", key("mobile-key", "k1")),
    application("shop/web", key("web-key", "w1")),
    application("shop/banned", key("banned-key", "b1")),
    subscription("shop/mobile-orders", "mobile", "orders", plan="gold"),
    subscription("shop/banned-orders", "banned", "orders", active=False),
)


def enforcer_group(node: Node, context: grpc.aio.ServicerContext) -> str:
    if node.cluster != ENFORCER_NODE_CLUSTER:
        raise PermissionError(f"node cluster {node.cluster!r} is not an enforcer's")
    return GROUP


@dataclass
class Feed:
    """An agent's xDS side, as far as an enforcer sees it."""

    cache: ResourceCache
    port: int
    server: grpc.aio.Server
    streams: Recorder


@contextlib.asynccontextmanager
async def serving_xds(resources: Mapping[str, Mapping[str, VersionedResource]], port: int = 0) -> AsyncIterator[Feed]:
    cache = ResourceCache()
    cache.set_snapshot(GROUP, resources)
    streams = Recorder()
    server = grpc.aio.server()
    add_to_server(XdsServer(cache, node_group=enforcer_group, callbacks=streams, name="test"), server)
    port = port or free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    try:
        yield Feed(cache, port, server, streams)
    finally:
        await server.stop(None)


@dataclass
class Enforcer:
    process: Process
    grpc_port: int
    metrics_port: int

    async def until(self, what: str, check: Callable[[], Awaitable[bool]]) -> None:
        """Poll `check` without blocking the test's own xDS server; fail with the enforcer's log."""

        async def alive_and_true() -> bool:
            held = await check()
            assert held or self.process.alive(), f"the enforcer exited:\n{self.process.log()[-4000:]}"
            return held

        try:
            await eventually_async(alive_and_true, timeout=PATIENCE, what=what)
        except TimeoutError as timed_out:
            raise AssertionError(f"{timed_out}\n{self.process.log()[-4000:]}") from None

    def metrics(self) -> str:
        return scrape(self.metrics_port)

    async def decisions(self, decision: str) -> float:
        """How many checks the enforcer has answered with `decision` so far."""
        text = await asyncio.to_thread(self.metrics)
        return Scrape(text).total("meshplane_enforcer_decisions_total", decision=decision)


@contextlib.contextmanager
def enforcer_process(tmp_path: Path, xds_port: int) -> Iterator[Enforcer]:
    grpc_port, metrics_port = free_port(), free_port()
    argv = [
        *MESHPLANE,
        "enforcer",
        "--grpc-address",
        f"127.0.0.1:{grpc_port}",
        "--xds-address",
        f"127.0.0.1:{xds_port}",
        "--node-id",
        NODE_ID,
        "--metrics-address",
        f"127.0.0.1:{metrics_port}",
    ]
    with running(argv, tmp_path / "enforcer.log") as process:
        yield Enforcer(process, grpc_port, metrics_port)


@contextlib.asynccontextmanager
async def started(
    tmp_path: Path, feed: Feed
) -> AsyncIterator[tuple[Enforcer, external_auth_pb2_grpc.AuthorizationStub]]:
    """An enforcer on `feed` and a stub to it, once the enforcer has allowed mobile's key."""
    with enforcer_process(tmp_path, feed.port) as enforcer:
        await asyncio.to_thread(
            enforcer.process.wait_ready, lambda: port_open(enforcer.grpc_port), 30.0, "the enforcer's gRPC port"
        )
        async with grpc.aio.insecure_channel(f"127.0.0.1:{enforcer.grpc_port}") as channel:
            stub = external_auth_pb2_grpc.AuthorizationStub(channel)
            await enforcer.until("mobile's key to be allowed", lambda: answers(stub, "mobile-key", code_pb2.OK))
            yield enforcer, stub


async def check(
    stub: external_auth_pb2_grpc.AuthorizationStub,
    key: str | None = None,
    path: str = "/orders/items",
    api: str = "shop/orders",
) -> external_auth_pb2.CheckResponse:
    headers = {"x-api-key": key} if key is not None else {}
    return await stub.Check(check_request(api, headers, path), timeout=5)


async def answers(stub: external_auth_pb2_grpc.AuthorizationStub, key: str, code: int) -> bool:
    return (await check(stub, key)).status.code == code


async def test_enforcer_allows_subscribed_keys_and_refuses_the_rest(tmp_path: Path) -> None:
    async with serving_xds(by_type(*FLEET)) as feed, started(tmp_path, feed) as (enforcer, stub):
        allowed = await check(stub, "mobile-key")
        upstream = {option.header.key: option.header.value for option in allowed.ok_response.headers}
        assert upstream == {"x-meshplane-application": "mobile", "x-meshplane-plan": "gold", "x-meshplane-key-id": "k1"}
        assert list(allowed.ok_response.headers_to_remove) == ["x-api-key"]
        assert dict(allowed.dynamic_metadata) == {"application": "shop/mobile", "plan": "gold"}
        assert (await check(stub, path="/orders/items?api_key=mobile-key")).status.code == code_pb2.OK

        refused_unsubscribed = await enforcer.decisions("not_subscribed")
        refusals = {
            "no key": await check(stub),
            "bad key": await check(stub, "guess"),
            "not subscribed": await check(stub, "web-key"),
            "blocked": await check(stub, "banned-key"),
            "unknown API": await check(stub, "mobile-key", api="shop/unknown"),
        }
        answered = {what: (r.status.code, r.denied_response.status.code) for what, r in refusals.items()}
        assert answered == {
            "no key": (code_pb2.UNAUTHENTICATED, 401),
            "bad key": (code_pb2.UNAUTHENTICATED, 401),
            "not subscribed": (code_pb2.PERMISSION_DENIED, 403),
            "blocked": (code_pb2.PERMISSION_DENIED, 403),
            "unknown API": (code_pb2.PERMISSION_DENIED, 403),
        }

        assert (NODE_ID, GROUP, True) in feed.streams.opened
        assert await enforcer.decisions("not_subscribed") == refused_unsubscribed + 1
        metrics = await asyncio.to_thread(enforcer.metrics)
        assert 'meshplane_enforcer_config_updates_total{result="applied",type="EnforcerApplication"}' in metrics
    assert "mobile-key" not in enforcer.process.log()


async def test_revocation_takes_effect_live_and_a_malformed_entry_is_left_out_of_its_update(tmp_path: Path) -> None:
    async with serving_xds(by_type(*FLEET)) as feed, started(tmp_path, feed) as (enforcer, stub):
        rotated = application("shop/mobile", key("mobile-key-2", "k2"))
        feed.cache.update(GROUP, ENFORCER_APPLICATION_TYPE, upserts=[rotated])
        await enforcer.until(
            "the revoked key to be refused", lambda: answers(stub, "mobile-key", code_pb2.UNAUTHENTICATED)
        )
        assert await answers(stub, "mobile-key-2", code_pb2.OK)

        short_digest = enforcer_pb2.EnforcerApplication(
            project="shop", name="mobile", keys=[enforcer_pb2.KeyDigest(id="k3", sha256=b"short")]
        )
        banned_rotated = application("shop/banned", key("banned-key-2", "b2"))
        feed.cache.update(GROUP, ENFORCER_APPLICATION_TYPE, upserts=[pack("shop/mobile", short_digest), banned_rotated])
        await feed.streams.signal.until(lambda: bool(feed.streams.nacks))
        assert "shop/mobile" in feed.streams.nacks[0][3] and "sha256" in feed.streams.nacks[0][3]
        assert await answers(stub, "mobile-key-2", code_pb2.OK)  # the last good version of the bad entry
        assert await answers(stub, "banned-key-2", code_pb2.PERMISSION_DENIED)  # the rest of the update: taken
        assert await answers(stub, "banned-key", code_pb2.UNAUTHENTICATED)

        fixed = application("shop/mobile", key("mobile-key-3", "k3"))
        feed.cache.update(GROUP, ENFORCER_APPLICATION_TYPE, upserts=[fixed])
        await enforcer.until("the fixed version to be taken", lambda: answers(stub, "mobile-key-3", code_pb2.OK))

        feed.cache.update(GROUP, ENFORCER_APPLICATION_TYPE, removals=["shop/mobile"])
        await enforcer.until(
            "the removed application's key to be refused",
            lambda: answers(stub, "mobile-key-3", code_pb2.UNAUTHENTICATED),
        )


async def test_enforcer_keeps_its_last_configuration_while_the_agent_is_away(tmp_path: Path) -> None:
    async with serving_xds(by_type(*FLEET)) as feed, started(tmp_path, feed) as (enforcer, stub):
        await feed.server.stop(None)
        for _ in range(5):  # across several of its reconnection attempts
            assert await answers(stub, "mobile-key", code_pb2.OK)
            assert await answers(stub, "web-key", code_pb2.PERMISSION_DENIED)
            await asyncio.sleep(0.2)

        # Back with the key revoked: the enforcer resumes from what it holds and takes the difference.
        without_mobile = by_type(*(r for r in FLEET if r.name != "shop/mobile"))
        async with serving_xds(without_mobile, port=feed.port):
            await enforcer.until("the key to be refused", lambda: answers(stub, "mobile-key", code_pb2.UNAUTHENTICATED))
            assert await answers(stub, "web-key", code_pb2.PERMISSION_DENIED)

        enforcer.process.stop()
        assert enforcer.process.popen.returncode == 0, enforcer.process.log()[-4000:]
        assert "enforcer stopped" in enforcer.process.log()
