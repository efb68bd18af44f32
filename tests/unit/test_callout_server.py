"""The callout server as a grpcio client (Envoy's side of the wire) sees it: answers, statuses, stopping."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import grpc
import pytest
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from meshplane.callout_server import CalloutServer, Unary
from meshplane_testing.process import free_port

SHOULD_RATE_LIMIT = rls_pb2.DESCRIPTOR.services_by_name["RateLimitService"].methods_by_name["ShouldRateLimit"]
Answer = Callable[[rls_pb2.RateLimitRequest], Awaitable[rls_pb2.RateLimitResponse]]


@asynccontextmanager
async def serving(answer: Answer) -> AsyncIterator[tuple[CalloutServer, grpc.aio.Channel]]:
    server = CalloutServer([Unary(SHOULD_RATE_LIMIT, answer)])
    port = free_port()
    await server.start(f"127.0.0.1:{port}")
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield server, channel
    finally:
        await server.stop(0)


def ask(channel: grpc.aio.Channel, domain: str) -> Awaitable[rls_pb2.RateLimitResponse]:
    return rls_pb2_grpc.RateLimitServiceStub(channel).ShouldRateLimit(
        rls_pb2.RateLimitRequest(domain=domain), timeout=5
    )


async def echo_domain(request: rls_pb2.RateLimitRequest) -> rls_pb2.RateLimitResponse:
    return rls_pb2.RateLimitResponse(
        overall_code=rls_pb2.RateLimitResponse.OVER_LIMIT if request.domain == "full" else rls_pb2.RateLimitResponse.OK
    )


async def test_each_call_gets_the_answer_to_its_own_request() -> None:
    async with serving(echo_domain) as (_, channel):
        answers = await asyncio.gather(*(ask(channel, domain) for domain in ["full", "open"] * 20))

    assert [a.overall_code for a in answers] == [
        rls_pb2.RateLimitResponse.OVER_LIMIT,
        rls_pb2.RateLimitResponse.OK,
    ] * 20


async def test_a_refusal_reaches_the_caller_as_its_status_and_message() -> None:
    async def unavailable(request: rls_pb2.RateLimitRequest) -> rls_pb2.RateLimitResponse:
        raise GRPCError(Status.UNAVAILABLE, "redis: connection refused")

    async with serving(unavailable) as (_, channel):
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await ask(channel, "x")

    assert failed.value.code() is grpc.StatusCode.UNAVAILABLE
    assert failed.value.details() == "redis: connection refused"


async def test_a_method_not_served_is_unimplemented() -> None:
    async with serving(echo_domain) as (_, channel):
        call = channel.unary_unary("/envoy.service.ratelimit.v3.RateLimitService/Other")
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await call(b"", timeout=5)

    assert failed.value.code() is grpc.StatusCode.UNIMPLEMENTED


async def test_stopping_lets_calls_in_flight_answer_and_refuses_new_ones() -> None:
    release = asyncio.Event()
    started = asyncio.Event()

    async def held(request: rls_pb2.RateLimitRequest) -> rls_pb2.RateLimitResponse:
        started.set()
        await release.wait()
        return await echo_domain(request)

    async with serving(held) as (server, channel):
        in_flight = asyncio.ensure_future(ask(channel, "full"))
        await asyncio.wait_for(started.wait(), 5)
        stopping = asyncio.create_task(server.stop(5))
        await asyncio.sleep(0.05)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await ask(channel, "new")
        assert not stopping.done()
        release.set()

        assert (await in_flight).overall_code == rls_pb2.RateLimitResponse.OVER_LIMIT
        await asyncio.wait_for(stopping, 5)

    assert refused.value.code() is grpc.StatusCode.UNAVAILABLE


async def test_a_call_still_running_after_the_grace_is_refused_at_once() -> None:
    async def forever(request: rls_pb2.RateLimitRequest) -> rls_pb2.RateLimitResponse:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async with serving(forever) as (server, channel):
        call = asyncio.ensure_future(ask(channel, "x"))
        await asyncio.sleep(0.1)
        loop = asyncio.get_running_loop()
        began = loop.time()
        await asyncio.wait_for(server.stop(0.2), 5)
        stopped_after = loop.time() - began

        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await call

    assert 0.2 <= stopped_after < 2
    assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
