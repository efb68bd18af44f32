"""`meshplane ratelimiter` as a process: fed over delta ADS by an xDS server in the test, asked
ShouldRateLimit over real gRPC, counting in memory or in a real Redis shared by two replicas."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from envoy.config.core.v3.base_pb2 import Node
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc

from meshplane.dataplane import RATELIMIT_CONFIG_TYPE, RATELIMITER_NODE_CLUSTER
from meshplane.proto.v1 import rls_conf_pb2
from meshplane.xds.cache import ResourceCache
from meshplane.xds.resource import pack
from meshplane.xds.server import NoCallbacks, XdsServer, add_to_server
from meshplane_testing.meshplane import MESHPLANE
from meshplane_testing.metrics import Scrape, scrape
from meshplane_testing.process import Process, free_port, port_open, running
from meshplane_testing.ratelimit_factories import OK, OVER_LIMIT, config, node, policy, request
from meshplane_testing.redis import RedisServer

GROUP = "ratelimiters"
PATIENCE = 15.0
"""Seconds anything expected of a limiter may take (its reconnection backoff tops out at 5)."""
SECOND, HOUR = rls_conf_pb2.SECOND, rls_conf_pb2.HOUR


def limiter_group(node: Node, context: grpc.aio.ServicerContext) -> str:
    if node.cluster != RATELIMITER_NODE_CLUSTER:
        raise PermissionError(f"node cluster {node.cluster!r} is not a rate limiter's")
    return GROUP


@dataclass
class Deliveries(NoCallbacks):
    """What each node holds (by its ACKs), and what it refused."""

    held: dict[str, dict[str, str]] = field(default_factory=dict)
    refused: list[tuple[str, str]] = field(default_factory=list)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def on_ack(self, group: str, node: Node, type_url: str, versions: Mapping[str, str]) -> None:
        self.held[node.id] = dict(versions)
        self._changed.set()

    async def on_nack(self, group: str, node: Node, type_url: str, versions: Mapping[str, str], message: str) -> None:
        self.refused.append((node.id, message))
        self._changed.set()

    async def until(self, what: str, condition: Callable[[], bool], log: Callable[[], str] = str) -> None:
        """Wait for an ACK or NACK that makes `condition` true; fail naming `what`, with `log`'s tail."""
        try:
            async with asyncio.timeout(PATIENCE):
                while not condition():
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            raise AssertionError(f"timed out waiting for {what}\n{log()[-4000:]}") from None


@dataclass
class Feed:
    """The agent's side of the rate limiters' xDS."""

    cache: ResourceCache
    port: int
    server: grpc.aio.Server
    deliveries: Deliveries

    def publish(self, *configs: rls_conf_pb2.RateLimitConfig) -> dict[str, str]:
        """Serve exactly `configs` (named by their `name`); their versions by name."""
        resources = {item.name: pack(item.name, item) for item in configs}
        self.cache.set_type(GROUP, RATELIMIT_CONFIG_TYPE, resources)
        return {name: resource.version for name, resource in resources.items()}

    async def delivered(self, versions: Mapping[str, str], *limiters: LimiterProcess) -> None:
        """Wait until every limiter has ACKed exactly `versions`."""
        for limiter in limiters:
            await self.deliveries.until(
                f"{limiter.node_id} to take {dict(versions)}",
                lambda limiter=limiter: self.deliveries.held.get(limiter.node_id) == dict(versions),
                limiter.process.log,
            )


@contextlib.asynccontextmanager
async def serving_xds(*configs: rls_conf_pb2.RateLimitConfig, port: int = 0) -> AsyncIterator[Feed]:
    deliveries = Deliveries()
    server = grpc.aio.server()
    cache = ResourceCache()
    add_to_server(XdsServer(cache, node_group=limiter_group, callbacks=deliveries, name="test-agent"), server)
    port = port or free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    feed = Feed(cache, port, server, deliveries)
    feed.publish(*configs)
    await server.start()
    try:
        yield feed
    finally:
        await server.stop(None)


@dataclass
class LimiterProcess:
    process: Process
    node_id: str
    stub: rls_pb2_grpc.RateLimitServiceStub
    metrics_port: int

    async def ask(self, req: rls_pb2.RateLimitRequest) -> rls_pb2.RateLimitResponse:
        return await self.stub.ShouldRateLimit(req, timeout=5)

    def metrics(self) -> str:
        return scrape(self.metrics_port)

    async def decisions(self, code: str) -> float:
        """How many of domain shop's descriptors the limiter has answered with `code` so far."""
        text = await asyncio.to_thread(self.metrics)
        return Scrape(text).total("meshplane_ratelimit_decisions_total", code=code, domain="shop")


@contextlib.asynccontextmanager
async def ratelimiter(
    tmp_path: Path, feed: Feed, name: str = "limiter", redis_url: str | None = None
) -> AsyncIterator[LimiterProcess]:
    """A `meshplane ratelimiter` process on `feed`, once its gRPC port is open; stopped after."""
    grpc_port, metrics_port = free_port(), free_port()
    argv = [
        *MESHPLANE,
        "ratelimiter",
        "--grpc-address",
        f"127.0.0.1:{grpc_port}",
        "--xds-address",
        f"127.0.0.1:{feed.port}",
        "--node-id",
        name,
        "--metrics-address",
        f"127.0.0.1:{metrics_port}",
        *(["--redis-url", redis_url] if redis_url else []),
    ]
    with running(argv, tmp_path / f"{name}.log") as process:
        await asyncio.to_thread(process.wait_ready, lambda: port_open(grpc_port), 30.0, f"{name}'s gRPC port")
        async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            yield LimiterProcess(process, name, rls_pb2_grpc.RateLimitServiceStub(channel), metrics_port)


def codes(answers: list[rls_pb2.RateLimitResponse]) -> list[int]:
    return [answer.overall_code for answer in answers]


def remaining(answers: list[rls_pb2.RateLimitResponse]) -> list[int]:
    return [answer.statuses[0].limit_remaining for answer in answers]


@dataclass
class Window:
    """Answers to one descriptor asked within one second-window."""

    pairs: list[tuple[str, str]]
    answers: list[rls_pb2.RateLimitResponse]
    over_limit_before: float
    """The limiter's count of OVER_LIMIT answers before this window's requests."""


async def within_one_second(limiter: LimiterProcess, pairs: list[tuple[str, str]], count: int) -> Window:
    """`count` answers to the same descriptor, all asked within one second-window (retried with a
    fresh value when a slow machine lets a window end halfway)."""
    for attempt in range(3):
        over_limit_before = await limiter.decisions("OVER_LIMIT")
        await asyncio.sleep(1.02 - time.time() % 1)  # just after a window starts
        window = int(time.time())
        fresh = [(key, f"{value}-{attempt}") for key, value in pairs]
        answers = [await limiter.ask(request("shop", fresh)) for _ in range(count)]
        if int(time.time()) == window:
            return Window(fresh, answers, over_limit_before)
    raise AssertionError("no second-window was long enough for the requests")


async def test_requests_past_the_limit_are_over_it_until_the_next_window(tmp_path: Path) -> None:
    limits = config("shop", node("client", "", policy(3, SECOND, name="per-client")))
    async with serving_xds(limits) as feed, ratelimiter(tmp_path, feed) as limiter:
        await feed.delivered(feed.publish(limits), limiter)

        window = await within_one_second(limiter, [("client", "10.0.0.1")], 4)
        answers = window.answers

        assert codes(answers) == [OK, OK, OK, OVER_LIMIT]
        assert remaining(answers) == [2, 1, 0, 0]
        last = answers[-1].statuses[0]
        assert last.code == OVER_LIMIT
        assert (last.current_limit.name, last.current_limit.requests_per_unit) == ("per-client", 3)
        assert last.current_limit.unit == rls_pb2.RateLimitResponse.RateLimit.SECOND
        assert last.duration_until_reset.seconds == 1
        other_client = await limiter.ask(request("shop", [("client", "10.0.0.2")]))
        assert other_client.overall_code == OK

        await asyncio.sleep(1.02 - time.time() % 1)
        again = await limiter.ask(request("shop", window.pairs))
        assert (again.overall_code, again.statuses[0].limit_remaining) == (OK, 2)

        unknown = await limiter.ask(request("elsewhere", window.pairs))
        assert (unknown.overall_code, len(unknown.statuses)) == (OK, 0)
        assert await limiter.decisions("OVER_LIMIT") == window.over_limit_before + 1
        metrics = await asyncio.to_thread(limiter.metrics)
        assert 'meshplane_ratelimit_config_updates_total{result="applied"} 1.0' in metrics

        limiter.process.stop()
        assert limiter.process.popen.returncode == 0, limiter.process.log()[-4000:]
        assert "rate limiter stopping" in limiter.process.log()


async def test_two_limiters_on_one_redis_share_one_count(tmp_path: Path, redis_server: RedisServer) -> None:
    domain = f"shop-{uuid.uuid4().hex[:8]}"  # counters of its own in the session's Redis
    limits = config(domain, node("api", "orders", policy(4, HOUR)))
    async with (
        serving_xds(limits) as feed,
        ratelimiter(tmp_path, feed, "one", redis_server.url) as one,
        ratelimiter(tmp_path, feed, "two", redis_server.url) as two,
    ):
        await feed.delivered(feed.publish(limits), one, two)
        orders = request(domain, [("api", "orders")])

        answers = [await replica.ask(orders) for replica in (one, two, one, two, one, two)]

        assert codes(answers) == [OK, OK, OK, OK, OVER_LIMIT, OVER_LIMIT]
        assert remaining(answers) == [3, 2, 1, 0, 0, 0]


async def test_limits_change_live_and_a_bad_update_is_refused_keeping_the_last(tmp_path: Path) -> None:
    one_an_hour = config("shop", node("api", "orders", policy(1, HOUR)))
    orders = request("shop", [("api", "orders")])
    async with serving_xds(one_an_hour) as feed, ratelimiter(tmp_path, feed) as limiter:
        await feed.delivered(feed.publish(one_an_hour), limiter)
        assert codes([await limiter.ask(orders), await limiter.ask(orders)]) == [OK, OVER_LIMIT]

        three = feed.publish(config("shop", node("api", "orders", policy(3, HOUR))))
        await feed.delivered(three, limiter)
        assert codes([await limiter.ask(orders), await limiter.ask(orders)]) == [OK, OVER_LIMIT]  # 3rd, 4th

        feed.publish(config("shop", node("api", "orders", policy(0, HOUR))))
        await feed.deliveries.until("the zero limit to be refused", lambda: len(feed.deliveries.refused) == 1)
        feed.publish(
            config("shop", node("api", "orders", policy(3, HOUR))),
            rls_conf_pb2.RateLimitConfig(name="shop-again", domain="shop"),
        )
        await feed.deliveries.until(
            "the second config of the domain to be refused", lambda: len(feed.deliveries.refused) == 2
        )

        assert [message for _, message in feed.deliveries.refused] == [
            "shop: descriptors[0].rate_limit.requests_per_unit: must be at least 1 (or set unlimited)",
            "shop-again: domain 'shop' is already configured by shop",
        ]
        assert feed.deliveries.held[limiter.node_id] == three
        answer = await limiter.ask(orders)
        assert (answer.overall_code, answer.statuses[0].current_limit.requests_per_unit) == (OVER_LIMIT, 3)


async def test_a_limiter_keeps_its_limits_while_the_agent_is_away(tmp_path: Path) -> None:
    two_an_hour = config("shop", node("api", "orders", policy(2, HOUR)))
    orders = request("shop", [("api", "orders")])
    async with serving_xds(two_an_hour) as feed, ratelimiter(tmp_path, feed) as limiter:
        await feed.delivered(feed.publish(two_an_hour), limiter)
        await feed.server.stop(None)

        answers = []
        for _ in range(4):  # across several of its reconnection attempts
            answers.append(await limiter.ask(orders))
            await asyncio.sleep(0.3)
        assert codes(answers) == [OK, OK, OVER_LIMIT, OVER_LIMIT]

        # Back with a higher limit: the limiter resumes from what it holds and takes the difference.
        five = config("shop", node("api", "orders", policy(5, HOUR)))
        async with serving_xds(five, port=feed.port) as back:
            await back.delivered(back.publish(five), limiter)
            answer = await limiter.ask(orders)
            assert (answer.overall_code, answer.statuses[0].limit_remaining) == (OK, 0)


async def test_an_unreachable_redis_fails_the_call_as_unavailable_at_once(tmp_path: Path) -> None:
    limits = config("shop", node("api", "orders", policy(2, HOUR)))
    async with (
        serving_xds(limits) as feed,
        ratelimiter(tmp_path, feed, redis_url=f"redis://127.0.0.1:{free_port()}/0") as limiter,
    ):
        await feed.delivered(feed.publish(limits), limiter)

        started = time.monotonic()
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await limiter.ask(request("shop", [("api", "orders")]))

        assert time.monotonic() - started < 2.0
        assert failed.value.code() is grpc.StatusCode.UNAVAILABLE
        assert failed.value.details().startswith("redis: ")
        assert (await limiter.ask(request("elsewhere", [("api", "orders")]))).overall_code == OK
        metrics = await asyncio.to_thread(limiter.metrics)
        assert 'meshplane_ratelimit_decisions_total{code="UNAVAILABLE",domain="shop"} 1.0' in metrics
