"""One trace per change: the REST write, its store transaction, the push to the agent, the agent's apply and
the gateway's ACK share the trace the writer started, even for an edge that was offline at the write.

The server and the agent run in this test's event loop, so one in-memory exporter sees both sides; the
gateway is a real Envoy, so its ACK is real.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from meshplane.agent.runtime import API_TYPE, Agent, assemble
from meshplane.config import AgentSettings, ServerSettings
from meshplane.observability.tracing import configure_tracing, tracer
from meshplane.server.main import run_server
from meshplane_testing import documents
from meshplane_testing.envoy import run_envoy
from meshplane_testing.eventually import eventually_async
from meshplane_testing.gateway import Gateway, from_upstream, status
from meshplane_testing.process import free_port
from meshplane_testing.tcp_proxy import run_tcp_proxy
from meshplane_testing.tracing import RecordedSpans
from meshplane_testing.upstream import run_upstream

CLUSTER = "edge-1"
PATIENCE = 15.0  # how long what a test waits for may take
SPAN_NAMES = ("meshplane.write API", "meshplane.store.transaction", "meshplane.push", "meshplane.agent.apply")


async def trace_holding(spans: RecordedSpans, trace_id: int, *names: str) -> list[ReadableSpan]:
    """The trace's spans once it holds one of each name (spans are exported when they end)."""

    def complete() -> list[ReadableSpan] | None:
        found = spans.finished(trace_id)
        return found if {*names} <= {span.name for span in found} else None

    return await eventually_async(complete, timeout=PATIENCE, what=f"spans {sorted(names)} of the trace")


@dataclass
class Server:
    url: str
    grpc_address: str
    headers: dict[str, str]


@contextlib.asynccontextmanager
async def server_running(tmp_path: Path) -> AsyncIterator[Server]:
    settings = ServerSettings(
        insecure=True,
        data_dir=tmp_path / "server",
        http_address=f"127.0.0.1:{free_port()}",
        grpc_address=f"127.0.0.1:{free_port()}",
    )
    stop = asyncio.Event()
    task = asyncio.create_task(run_server(settings, stop))
    url = f"http://{settings.http_address}"
    try:
        async with httpx.AsyncClient(base_url=url, timeout=5) as http, asyncio.timeout(20):
            while (await _ready(http)) is False:
                if task.done():
                    task.result()
                await asyncio.sleep(0.05)
        # A server that asks for a bearer token writes its first admin token into its data directory.
        token_file = settings.data_dir / "admin-token"
        headers = {"authorization": f"Bearer {token_file.read_text().strip()}"} if token_file.exists() else {}
        yield Server(url, settings.grpc_address, headers)
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)


async def _ready(http: httpx.AsyncClient) -> bool:
    try:
        return (await http.get("/readyz")).status_code == 200
    except httpx.TransportError:
        return False


@contextlib.asynccontextmanager
async def agent_running(tmp_path: Path, server_address: str) -> AsyncIterator[Agent]:
    settings = AgentSettings(
        cluster=CLUSTER,
        insecure=True,
        server=server_address,
        in_cluster=False,
        state_dir=tmp_path / "agent",
        xds_address=f"127.0.0.1:{free_port()}",
        gateway_address=f"127.0.0.1:{free_port()}",
        admin_address=f"127.0.0.1:{free_port()}",
        allow_loopback_backends=True,
    )
    agent = await assemble(settings)
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        yield agent
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)


@contextlib.asynccontextmanager
async def gateway_running(tmp_path: Path, agent: Agent) -> AsyncIterator[Gateway]:
    """A real Envoy fed by the agent; started and stopped off the event loop, which the agent needs meanwhile."""
    with contextlib.ExitStack() as stack:
        xds_port = int(agent.settings.xds_address.rpartition(":")[2])
        await asyncio.to_thread(stack.enter_context, run_envoy(tmp_path, "gw-1", xds_port))
        gateway = Gateway(int(agent.settings.gateway_address.rpartition(":")[2]))
        stack.callback(gateway.close)
        try:
            yield gateway
        finally:
            await asyncio.to_thread(stack.close)


def traceparent() -> tuple[int, int, str]:
    """A caller's trace: (trace id, span id, the `traceparent` header naming them)."""
    trace_id, span_id = secrets.randbits(128) | 1, secrets.randbits(64) | 1
    return trace_id, span_id, f"00-{trace_id:032x}-{span_id:016x}-01"


async def put_api(server: Server, upstream_port: int, header: str) -> None:
    doc = documents.api("orders", backends=[documents.backend(upstream_port)])
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
        response = await http.put(
            "/v1/projects/default/apis/orders", json=doc, headers={**server.headers, "traceparent": header}
        )
    assert response.status_code == 201, response.text


def one(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    named = [span for span in spans if span.name == name]
    assert len(named) == 1, f"{name}: {[s.name for s in spans]}"
    return named[0]


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def assert_one_trace(spans: list[ReadableSpan], caller_span_id: int) -> None:
    """REST request <- write <- store transaction; write <- push <- agent apply <- gateway ACK."""
    request = one(spans, "PUT /v1/projects/{project}/apis/{name}")
    write, store, push, apply = (one(spans, name) for name in SPAN_NAMES)
    assert parent_of(request) == caller_span_id
    assert parent_of(write) == request.context.span_id
    assert parent_of(store) == write.context.span_id
    assert parent_of(push) == write.context.span_id
    assert parent_of(apply) == push.context.span_id
    acks = [span for span in spans if span.name == "meshplane.gateway.ack"]
    assert acks and all(parent_of(ack) == apply.context.span_id for ack in acks)
    assert acks[-1].attributes["meshplane.outcome"] == "Applied"
    assert acks[-1].attributes["meshplane.gateways"] == 1
    assert all(span.status.status_code is not StatusCode.ERROR for span in spans)
    assert write.attributes["meshplane.name"] == "orders"
    assert push.attributes["meshplane.cluster"] == CLUSTER
    assert push.attributes["meshplane.type"] == "API"
    assert push.attributes["meshplane.resources"] == 1
    assert apply.attributes["meshplane.cluster"] == CLUSTER


@pytest.fixture
def upstream_port() -> Iterator[int]:
    """The port of upstream `one`, which the API `put_api` writes routes to."""
    with run_upstream("one") as (port, _):
        yield port


async def served_trace(gateway: Gateway, spans: RecordedSpans, trace_id: int) -> list[ReadableSpan]:
    """Once the gateway serves the written API: its write's trace, down to the gateway's ACK."""
    await asyncio.to_thread(gateway.wait_for, "/orders/items", from_upstream("one"))
    return await trace_holding(spans, trace_id, *SPAN_NAMES, "meshplane.gateway.ack")


@pytest.mark.envoy
@pytest.mark.timeout(90)
async def test_a_write_pushed_to_a_connected_agent_is_one_trace_down_to_the_gateway_ack(
    tmp_path: Path, recorded_spans: RecordedSpans, upstream_port: int
) -> None:
    trace_id, caller, header = traceparent()
    async with (
        asyncio.timeout(60),
        server_running(tmp_path) as server,
        agent_running(tmp_path, server.grpc_address) as agent,
        gateway_running(tmp_path, agent) as gateway,
    ):
        await asyncio.to_thread(gateway.wait_for, "/orders/items", status(404))
        await put_api(server, upstream_port, header)
        spans = await served_trace(gateway, recorded_spans, trace_id)
    assert_one_trace(spans, caller)


@pytest.mark.envoy
@pytest.mark.timeout(90)
async def test_an_edge_offline_at_the_write_joins_the_writes_trace_when_it_comes_back(
    tmp_path: Path, recorded_spans: RecordedSpans, upstream_port: int
) -> None:
    trace_id, caller, header = traceparent()
    async with asyncio.timeout(60), server_running(tmp_path) as server:
        with run_tcp_proxy(int(server.grpc_address.rpartition(":")[2])) as link:
            await asyncio.to_thread(link.block)
            async with agent_running(tmp_path, link.address) as agent, gateway_running(tmp_path, agent) as gateway:
                # The edge serves its last configuration while it cannot reach the server.
                await asyncio.to_thread(gateway.wait_for, "/orders/items", status(404))
                await put_api(server, upstream_port, header)
                await trace_holding(recorded_spans, trace_id, "meshplane.write API", "meshplane.store.transaction")
                assert "meshplane.push" not in {span.name for span in recorded_spans.finished(trace_id)}
                await asyncio.to_thread(link.resume)
                spans = await served_trace(gateway, recorded_spans, trace_id)
    assert_one_trace(spans, caller)


@pytest.mark.timeout(60)
async def test_with_tracing_off_nothing_is_recorded_and_changes_still_flow(
    tmp_path: Path, recorded_spans: RecordedSpans
) -> None:
    configure_tracing("meshplane-test")
    assert not tracer().start_span("probe").is_recording()
    _, _, header = traceparent()
    async with (
        asyncio.timeout(45),
        server_running(tmp_path) as server,
        agent_running(tmp_path, server.grpc_address) as agent,
    ):
        await put_api(server, free_port(), header)
        async with asyncio.timeout(PATIENCE):
            while True:
                if "default/orders" in agent.objects.get(API_TYPE, {}):
                    break
                await asyncio.sleep(0.05)
    assert recorded_spans.finished() == []
