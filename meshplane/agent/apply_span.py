"""The span of applying one update from the control plane, joined to the trace of the write behind it."""

from __future__ import annotations

from contextlib import AbstractContextManager

from opentelemetry.trace import Link, Span, SpanKind, get_current_span

from meshplane.observability.metrics import short_type
from meshplane.observability.tracing import context_of, tracer
from meshplane.xds.client import DeltaUpdate
from meshplane.xds.resource import carried_trace


def apply_span(update: DeltaUpdate, cluster: str) -> AbstractContextManager[Span]:
    """A child of the push that carried the update's first traced resource; pushes of other writes that
    arrived in the same update are linked, so each of their traces leads here too."""
    carriers = {}
    for resource in update.upserts:
        if (carried := carried_trace(resource)) is not None:
            carriers.setdefault(carried.get("traceparent"), carried)
    contexts = [context_of(carried) for carried in carriers.values()]
    links = [Link(get_current_span(context).get_span_context()) for context in contexts[1:]]
    return tracer().start_as_current_span(
        "meshplane.agent.apply",
        context=contexts[0] if contexts else None,
        kind=SpanKind.CONSUMER,
        links=links,
        attributes={
            "meshplane.cluster": cluster,
            "meshplane.type": short_type(update.type_url),
            "meshplane.upserts": len(update.upserts),
            "meshplane.removed": len(update.removed),
        },
    )
