"""An OTLP logs collector for gateway tests: it takes what Envoy's OpenTelemetry access logger exports."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2


class _Collector(logs_service_pb2_grpc.LogsServiceServicer):
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def Export(
        self, request: logs_service_pb2.ExportLogsServiceRequest, context: grpc.ServicerContext
    ) -> logs_service_pb2.ExportLogsServiceResponse:
        with self._lock:
            for resource_logs in request.resource_logs:
                for scope_logs in resource_logs.scope_logs:
                    self.records.extend(_record(record) for record in scope_logs.log_records)
        return logs_service_pb2.ExportLogsServiceResponse()


def _record(record: Any) -> dict[str, Any]:
    """`{"body": ..., "attributes": {key: value}}` of one log record, string values as they came."""
    return {
        "body": _value(record.body),
        "attributes": {attribute.key: _value(attribute.value) for attribute in record.attributes},
    }


def _value(value: common_pb2.AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind is not None else None


@contextlib.contextmanager
def run_otlp_logs_collector() -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """(port, records received) of a collector on a free loopback port."""
    collector = _Collector()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    logs_service_pb2_grpc.add_LogsServiceServicer_to_server(collector, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield port, collector.records
    finally:
        server.stop(grace=None)
