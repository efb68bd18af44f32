"""Pushes of traced resources: each joins its write's trace, hands its context to the client, and ends with
the client's verdict (which the server settles before its callbacks hear of it)."""

from __future__ import annotations

from dataclasses import replace

from opentelemetry.trace import StatusCode

from meshplane.observability.tracing import current_carrier, tracer
from meshplane.xds.cache import ResourceCache
from meshplane.xds.resource import VersionedResource, carried_trace
from meshplane.xds.server import XdsServer
from meshplane_testing.tracing import RecordedSpans
from meshplane_testing.xds_doubles import STRING, Agent, Recorder, serve_xds, text


def written(resource: VersionedResource, name: str) -> tuple[VersionedResource, int]:
    """`resource` as a traced write named `name` leaves it, and that write's span id."""
    with tracer().start_as_current_span(name) as span:
        return replace(resource, trace=current_carrier()), span.get_span_context().span_id


async def test_each_write_gets_a_push_span_whose_context_travels_with_its_resources(
    recorded_spans: RecordedSpans,
) -> None:
    first, first_id = written(text("a"), "write a")
    second, second_id = written(text("b"), "write b")
    cache = ResourceCache()
    cache.set_type("edge-1", STRING, {"a": first, "b": second, "c": text("c")})
    recorder = Recorder()
    xds = XdsServer(cache, node_group=lambda node, context: node.cluster, callbacks=recorder, name="sync")

    async with serve_xds(xds) as served:
        agent = Agent(served, "edge-1")
        async with agent.running():
            await recorder.signal.until(lambda: len(recorder.acks) == 1)

    pushes = {span.parent.span_id: span for span in recorded_spans.named("meshplane.push") if span.parent}
    assert set(pushes) == {first_id, second_id}
    push = pushes[first_id]
    assert push.attributes["meshplane.cluster"] == "edge-1"
    assert push.attributes["meshplane.type"] == "StringValue"
    assert push.attributes["meshplane.resources"] == 1
    assert list(push.attributes["meshplane.resource_names"]) == ["a"]
    assert push.status.status_code is StatusCode.UNSET

    carried = {resource.name: carried_trace(resource) for resource in agent.updates[0].upserts}
    assert carried["c"] is None
    for name, write_id in (("a", first_id), ("b", second_id)):
        trace = carried[name]
        assert trace is not None
        _, trace_id, span_id, _ = trace["traceparent"].split("-")
        assert int(span_id, 16) == pushes[write_id].context.span_id
        assert int(trace_id, 16) == pushes[write_id].context.trace_id


async def test_a_rejected_push_ends_in_error_with_the_clients_reason(recorded_spans: RecordedSpans) -> None:
    traced, _ = written(text("a"), "write a")
    cache = ResourceCache()
    cache.set_type("edge-1", STRING, {"a": traced})
    recorder = Recorder()
    xds = XdsServer(cache, node_group=lambda node, context: node.cluster, callbacks=recorder)

    async with serve_xds(xds) as served:
        agent = Agent(served, "edge-1", reject=lambda update: "a: port out of range")
        async with agent.running():
            await recorder.signal.until(lambda: len(recorder.nacks) == 1)

    (push,) = recorded_spans.named("meshplane.push")
    assert push.status.status_code is StatusCode.ERROR
    assert push.status.description == "a: port out of range"


async def test_untraced_resources_make_no_push_span(recorded_spans: RecordedSpans) -> None:
    cache = ResourceCache()
    cache.set_type("edge-1", STRING, {"a": text("a")})
    recorder = Recorder()
    xds = XdsServer(cache, node_group=lambda node, context: node.cluster, callbacks=recorder)

    async with serve_xds(xds) as served:
        agent = Agent(served, "edge-1")
        async with agent.running():
            await recorder.signal.until(lambda: len(recorder.acks) == 1)

    assert recorded_spans.finished() == []
    assert carried_trace(agent.updates[0].upserts[0]) is None
