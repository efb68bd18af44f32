"""Push spans: a delta response joins the trace of every traced write whose resources it carries.

One span per write (its resources share the write's context), a child of that write, lasting until the
client ACKs or NACKs the response. Each resource then carries its push span's context to the client,
which continues the trace when it applies the resource.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from opentelemetry.trace import Span, SpanKind, Status, StatusCode, set_span_in_context

from meshplane.observability.metrics import short_type
from meshplane.observability.tracing import context_of, current_carrier, tracer
from meshplane.xds.resource import VersionedResource


def encode_traced(
    upserts: Sequence[VersionedResource], type_url: str, group: str, server: str
) -> tuple[bytes, list[Span]]:
    """The encoded ``resources`` entries of `upserts`, and the push spans started for them."""
    entries = [res.delta_entry() for res in upserts if not res.trace]
    writes: dict[str, list[VersionedResource]] = {}
    for res in upserts:
        if res.trace:
            writes.setdefault(res.trace.get("traceparent", ""), []).append(res)
    spans = []
    for resources in writes.values():
        span = tracer().start_span(
            "meshplane.push",
            context=context_of(resources[0].trace),
            kind=SpanKind.PRODUCER,
            attributes={
                "meshplane.server": server,
                "meshplane.cluster": group,
                "meshplane.type": short_type(type_url),
                "meshplane.resources": len(resources),
                "meshplane.resource_names": [res.name for res in resources],
            },
        )
        carried = current_carrier(set_span_in_context(span))
        entries.extend(res.delta_entry(carried) for res in resources)
        spans.append(span)
    return b"".join(entries), spans


def end_pushes(spans: Iterable[Span], rejection: str | None = None) -> None:
    """The client answered (or never will, when `rejection` says so): the pushes are over."""
    for span in spans:
        if rejection is not None:
            span.set_status(Status(StatusCode.ERROR, rejection))
        span.end()
