"""Spans a test can look at: an in-memory exporter installed the way a process installs its OTLP one."""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


@dataclass
class RecordedSpans:
    provider: TracerProvider
    exporter: InMemorySpanExporter

    def finished(self, trace_id: int | None = None) -> list[ReadableSpan]:
        """Every span ended so far (of one trace, if given); spans still in the batch queue are flushed first."""
        self.provider.force_flush()
        spans = self.exporter.get_finished_spans()
        return [span for span in spans if trace_id is None or span.context.trace_id == trace_id]

    def named(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.finished() if span.name == name]
