"""Tracing: one trace per change, from the REST write to the gateways' ACK. Off unless configured.

Spans go to an OTLP collector (Jaeger, Tempo, ...) when the process is given an endpoint; without one the
API's no-op tracer stands in and a span costs next to nothing. Trace context crosses process boundaries
as W3C `traceparent` / `tracestate` entries: in HTTP headers, gRPC metadata, the store's event rows and
the per-resource metadata of delta xDS, so a push long after a write still joins the write's trace.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import structlog
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

ENDPOINT_VARIABLE = "OTEL_EXPORTER_OTLP_ENDPOINT"
Carrier = dict[str, str]
"""W3C trace context as text entries: `traceparent` and, when there is one, `tracestate`."""

_W3C = TraceContextTextMapPropagator()
_NO_OP = trace.NoOpTracerProvider()
# Held here rather than in the API's global, which can be set only once per process: tests switch it.
_provider: trace.TracerProvider = _NO_OP
_tracer: trace.Tracer = _NO_OP.get_tracer(__name__)


def configure_tracing(
    service_name: str, endpoint: str | None = None, *, exporter: SpanExporter | None = None
) -> TracerProvider | None:
    """Export spans to the OTLP gRPC `endpoint` (else $OTEL_EXPORTER_OTLP_ENDPOINT) or to `exporter`;
    with neither, tracing is off. Replaces (and flushes) what an earlier call set up.

    Returns the provider when tracing is on, for callers that must flush it.
    """
    global _provider, _tracer
    endpoint = endpoint or os.environ.get(ENDPOINT_VARIABLE)
    if isinstance(_provider, TracerProvider):
        _provider.shutdown()
    if exporter is None and not endpoint:
        _provider, _tracer = _NO_OP, _NO_OP.get_tracer(__name__)
        return None
    if exporter is None:
        # Imported here: its OTLP protos load only in processes that export.
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=endpoint)
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service_name}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    _provider, _tracer = provider, provider.get_tracer("meshplane")
    return provider


def tracer() -> trace.Tracer:
    """meshplane's tracer as configured now (looked up at each use, so reconfiguring takes effect)."""
    return _tracer


def current_carrier(context: Context | None = None) -> Carrier | None:
    """The W3C context of the current span (or of `context`); None when there is no valid one."""
    carrier: Carrier = {}
    _W3C.inject(carrier, context)
    return carrier or None


def context_of(carrier: Mapping[str, str] | None) -> Context:
    """A context whose parent is the span `carrier` names; an empty context for nothing valid."""
    return _W3C.extract(dict(carrier or {}))


def add_trace_ids(_logger: object, _method: str, event: structlog.typing.EventDict) -> structlog.typing.EventDict:
    """Name the span a line is logged in, so a trace and its logs find each other."""
    span = trace.get_current_span()
    if span.is_recording():
        context = span.get_span_context()
        event["trace_id"] = trace.format_trace_id(context.trace_id)
        event["span_id"] = trace.format_span_id(context.span_id)
    return event
