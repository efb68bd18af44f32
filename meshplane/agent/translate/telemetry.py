"""What the gateway tells about each request: one JSON access-log line, and per-API figures in its stats.

Each API route carries its API and operation as route metadata, which the log line reads, and a
`stat_prefix` of `api.<project>.<name>`: Envoy counts every request the route sends upstream under
`vhost.<virtual host>.route.api.<project>.<name>.` (`upstream_rq_total`, `upstream_rq_<code class>`,
the `upstream_rq_time` histogram), which `agent.api_figures` sums over virtual hosts.
"""

from __future__ import annotations

from envoy.config.accesslog.v3 import accesslog_pb2
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import config_source_pb2, extension_pb2, grpc_service_pb2, substitution_format_string_pb2
from envoy.config.route.v3 import route_components_pb2
from envoy.extensions.access_loggers.file.v3 import file_pb2
from envoy.extensions.access_loggers.grpc.v3 import als_pb2
from envoy.extensions.access_loggers.open_telemetry.v3 import logs_service_pb2
from envoy.extensions.access_loggers.stream.v3 import stream_pb2
from google.protobuf import struct_pb2
from opentelemetry.proto.common.v1 import common_pb2
from xds.type.v3 import typed_struct_pb2

from meshplane.agent.translate.access import service_cluster
from meshplane.agent.translate.apis import Api
from meshplane.agent.translate.common import packed
from meshplane.agent.translate.config import GatewaySettings
from meshplane.dataplane import APPLICATION_HEADER, KEY_ID_HEADER, PLAN_HEADER
from meshplane.model.kinds import Operation

ROUTE_METADATA = "meshplane"
STAT_PREFIX = "api"
ACCESS_LOG_STDOUT = "stdout"
OTLP_CLUSTER = "meshplane.access_log_collector"
OTLP_LOG_NAME = "meshplane.gateway"
_ROUTE = "%METADATA(ROUTE:" + ROUTE_METADATA + ":{key})%"

ACCESS_LOG_FIELDS = {
    "time": "%START_TIME(%Y-%m-%dT%H:%M:%S.%3fZ)%",
    "request_id": "%REQ(X-REQUEST-ID)%",
    "trace_id": "%CEL(request.headers.traceparent.substring(3, size(request.headers.traceparent) == 55 ? 35 : -1))%",
    "project": _ROUTE.format(key="project"),
    "api": _ROUTE.format(key="api"),
    "operation": _ROUTE.format(key="operation"),
    "application": f"%REQ({APPLICATION_HEADER})%",
    "plan": f"%REQ({PLAN_HEADER})%",
    "key_id": f"%REQ({KEY_ID_HEADER})%",
    "client_certificate_fingerprint": "%DOWNSTREAM_PEER_FINGERPRINT_256%",
    "method": "%REQ(:METHOD)%",
    "user_agent": "%REQ(USER-AGENT)%",
    "path": "%PATH(NQ:ORIG_OR_PATH)%",
    "status": "%RESPONSE_CODE%",
    "response_flags": "%RESPONSE_FLAGS%",
    "duration_ms": "%DURATION%",
    "request_duration_ms": "%REQUEST_DURATION%",
    "response_duration_ms": "%RESPONSE_DURATION%",
    "upstream_host": "%UPSTREAM_HOST%",
    "bytes_received": "%BYTES_RECEIVED%",
    "bytes_sent": "%BYTES_SENT%",
}
"""One line per request; unset values are null. The path is logged without its query, where keys may travel.
`trace_id` is the one of the caller's W3C `traceparent` (version 00 is 55 characters, the id at 3 to 35); with
no such header the expression fails (a missing key, a substring ending at -1), which Envoy logs as null."""
CEL_FORMATTER = "envoy.formatter.cel"
CEL_CONFIG = "type.googleapis.com/envoy.extensions.formatter.cel.v3.Cel"


def stat_prefix(project: str, name: str) -> str:
    return f"{STAT_PREFIX}.{project}.{name}"


def name_route(api: Api, op: Operation | None, route: route_components_pb2.Route) -> None:
    """Which API and operation a route serves, for the access log and the API's stats."""
    operation = f"{op.method.value} {op.path}" if op is not None else ""
    names = struct_pb2.Struct()
    names.update({"project": api.project, "api": api.name, "operation": operation})
    route.metadata.filter_metadata[ROUTE_METADATA].CopyFrom(names)
    route.stat_prefix = stat_prefix(api.project, api.name)


def access_logs(settings: GatewaySettings) -> list[accesslog_pb2.AccessLog]:
    """The gateway's access loggers: a JSON line to stdout or a file unless off, and OTLP when a collector is
    set (see `access_log_clusters`)."""
    loggers = []
    if settings.access_log is not None:
        line = _json_line()
        if settings.access_log == ACCESS_LOG_STDOUT:
            name, config = "envoy.access_loggers.stdout", packed(stream_pb2.StdoutAccessLog(log_format=line))
        else:
            config = packed(file_pb2.FileAccessLog(path=settings.access_log, log_format=line))
            name = "envoy.access_loggers.file"
        loggers.append(accesslog_pb2.AccessLog(name=name, typed_config=config))
    if settings.access_log_otlp_endpoint is not None:
        loggers.append(accesslog_pb2.AccessLog(name="envoy.access_loggers.open_telemetry", typed_config=_otlp()))
    return loggers


def access_log_clusters(settings: GatewaySettings) -> list[cluster_pb2.Cluster]:
    """The OTLP collector's cluster, when the gateway sends its access logs to one."""
    if settings.access_log_otlp_endpoint is None:
        return []
    return [service_cluster(OTLP_CLUSTER, settings.access_log_otlp_endpoint)]


def _cel_formatter() -> extension_pb2.TypedExtensionConfig:
    """Envoy's CEL formatter with its string functions (`substring`) on. The Python protos predate the
    formatter's `cel_config`, so the config travels as a TypedStruct, which Envoy reads by field name."""
    config = struct_pb2.Struct()
    config.update({"cel_config": {"enable_string_functions": True}})
    typed = typed_struct_pb2.TypedStruct(type_url=CEL_CONFIG, value=config)
    return extension_pb2.TypedExtensionConfig(name=CEL_FORMATTER, typed_config=packed(typed))


def _json_line() -> substitution_format_string_pb2.SubstitutionFormatString:
    fields = struct_pb2.Struct()
    fields.update(ACCESS_LOG_FIELDS)
    return substitution_format_string_pb2.SubstitutionFormatString(json_format=fields, formatters=[_cel_formatter()])


def _otlp() -> object:
    attributes = common_pb2.KeyValueList(
        values=[
            common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(string_value=value))
            for key, value in ACCESS_LOG_FIELDS.items()
        ]
    )
    config = logs_service_pb2.OpenTelemetryAccessLogConfig(
        common_config=als_pb2.CommonGrpcAccessLogConfig(
            log_name=OTLP_LOG_NAME,
            grpc_service=grpc_service_pb2.GrpcService(
                envoy_grpc=grpc_service_pb2.GrpcService.EnvoyGrpc(cluster_name=OTLP_CLUSTER)
            ),
            transport_api_version=config_source_pb2.ApiVersion.V3,
        ),
        body=common_pb2.AnyValue(string_value="%REQ(:METHOD)% %PATH(NQ:ORIG_OR_PATH)% %RESPONSE_CODE%"),
        attributes=attributes,
        formatters=[_cel_formatter()],
    )
    return packed(config)
