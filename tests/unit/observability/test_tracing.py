"""Tracing is off unless configured; W3C context survives a trip through text; log lines name their span."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
import structlog
from opentelemetry.trace import format_span_id, format_trace_id

from meshplane.observability.logging import configure_logging, get_logger
from meshplane.observability.tracing import ENDPOINT_VARIABLE, configure_tracing, context_of, current_carrier, tracer
from meshplane_testing.tracing import RecordedSpans


def test_without_an_endpoint_tracing_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENDPOINT_VARIABLE, raising=False)
    assert configure_tracing("meshplane-test") is None
    with tracer().start_as_current_span("anything") as span:
        assert not span.is_recording()
        assert current_carrier() is None


def test_the_standard_variable_turns_tracing_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENDPOINT_VARIABLE, "http://127.0.0.1:4317")
    try:
        assert configure_tracing("meshplane-test") is not None
        assert tracer().start_span("anything").is_recording()
    finally:
        monkeypatch.delenv(ENDPOINT_VARIABLE)
        assert configure_tracing("meshplane-test") is None


def test_a_carried_context_parents_the_spans_started_from_it(recorded_spans: RecordedSpans) -> None:
    with tracer().start_as_current_span("write") as write:
        carrier = current_carrier()
    assert carrier is not None and carrier["traceparent"].startswith("00-")
    with tracer().start_as_current_span("push", context=context_of(carrier)):
        pass
    (push,) = recorded_spans.named("push")
    assert push.context.trace_id == write.get_span_context().trace_id
    assert push.parent is not None and push.parent.span_id == write.get_span_context().span_id
    with tracer().start_as_current_span("root", context=context_of(None)):
        pass
    assert recorded_spans.named("root")[0].parent is None


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    """What the process logs, as configured for production but written here; logging is put back afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    configure_logging("json")
    written = io.StringIO()
    (handler,) = root.handlers
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(written)
    yield written
    root.handlers[:] = handlers
    root.setLevel(level)
    structlog.reset_defaults()


def test_log_lines_inside_a_span_name_it(recorded_spans: RecordedSpans, json_logs: io.StringIO) -> None:
    log = get_logger("meshplane.test")
    log.info("outside")
    with tracer().start_as_current_span("work") as span:
        log.info("inside", cluster="edge-1")
        logging.getLogger("meshplane.stdlib").warning("from the standard library")
    lines = [json.loads(line) for line in json_logs.getvalue().splitlines()]

    assert [line["message"] for line in lines] == ["outside", "inside", "from the standard library"]
    for line in lines:
        assert {"time", "level", "logger", "message"} <= line.keys()
    assert "trace_id" not in lines[0] and "span_id" not in lines[0]
    context = span.get_span_context()
    for line in lines[1:]:
        assert line["trace_id"] == format_trace_id(context.trace_id)
        assert line["span_id"] == format_span_id(context.span_id)
    assert lines[1]["cluster"] == "edge-1"
