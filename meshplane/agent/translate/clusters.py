"""Upstream clusters: one per serving backend, plus the endpoints of those Envoy learns over EDS."""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Sequence

from envoy.config.cluster.v3 import circuit_breaker_pb2, cluster_pb2, outlier_detection_pb2
from envoy.config.core.v3 import base_pb2, health_check_pb2, protocol_pb2
from envoy.config.endpoint.v3 import endpoint_components_pb2, endpoint_pb2
from envoy.extensions.transport_sockets.tls.v3 import common_pb2, secret_pb2, tls_pb2
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2
from envoy.type.matcher.v3 import string_pb2
from envoy.type.v3 import http_pb2
from google.protobuf import duration_pb2, wrappers_pb2

from meshplane.agent.translate.common import ads_source, duration, packed, socket_address
from meshplane.agent.translate.credentials import credential_filters
from meshplane.agent.translate.gateways import certificate_secret_name
from meshplane.agent.translate.memo import by_identity
from meshplane.config import SYSTEM_CA_FILE
from meshplane.model.kinds import Backend, BackendProtocol
from meshplane.model.upstream import CircuitBreaker, HealthCheck, OutlierDetection

HTTP_PROTOCOL_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
TLS_TRANSPORT_SOCKET = "envoy.transport_sockets.tls"
BACKEND_CONNECT_TIMEOUT = "5s"


@by_identity
def backend_resources(
    backend: Backend, name: str, project: str = ""
) -> tuple[cluster_pb2.Cluster, endpoint_pb2.ClusterLoadAssignment | None]:
    """An IP backend is an EDS cluster plus its endpoints (so a move is an endpoint update, not a new cluster);
    a hostname backend is a STRICT_DNS cluster that Envoy keeps resolving itself, with no EDS resource.
    `project` is the API's, whose TLSCertificates a backend may present. Kept per held backend (and name):
    the messages are shared by every later translation, so they are never changed once made."""
    host = backend.host
    assert host is not None, "service backends are given a host before they are translated"
    http2 = backend.protocol is not BackendProtocol.HTTP
    connect_timeout = duration(BACKEND_CONNECT_TIMEOUT)
    if not is_ip_literal(host):
        cluster = inline_cluster(name, host, backend.port, http2=http2, connect_timeout=connect_timeout)
        _apply_backend_policy(cluster, backend, project, http2=http2)
        return cluster, None
    cluster = eds_cluster(name, http2=http2, connect_timeout=connect_timeout)
    _apply_backend_policy(cluster, backend, project, http2=http2)
    return cluster, load_assignment(name, _unbracketed(host), backend.port)


def _apply_backend_policy(cluster: cluster_pb2.Cluster, backend: Backend, project: str, *, http2: bool) -> None:
    """What the backend asks of its connections: TLS, health checks, ejection and load thresholds, and the
    credential its requests carry (see `credentials`)."""
    if backend.tls is not None:
        cluster.transport_socket.CopyFrom(_backend_tls_socket(backend, project, http2=http2))
    if backend.health_check is not None:
        cluster.health_checks.append(_health_check(backend.health_check, _server_name(backend), http2=http2))
    if backend.outlier_detection is not None:
        cluster.outlier_detection.CopyFrom(_outlier_detection(backend.outlier_detection))
    if backend.circuit_breaker is not None:
        cluster.circuit_breakers.CopyFrom(_circuit_breakers(backend.circuit_breaker))
    if backend.credential is not None:
        options = http_protocol_options_pb2.HttpProtocolOptions()
        cluster.typed_extension_protocol_options[HTTP_PROTOCOL_OPTIONS].Unpack(options)
        options.http_filters.extend(credential_filters(cluster.name, backend.credential))
        cluster.typed_extension_protocol_options[HTTP_PROTOCOL_OPTIONS].CopyFrom(packed(options))


def _server_name(backend: Backend) -> str | None:
    """The name the backend answers to: its TLS SNI name if it sets one, else its host when that is a DNS name."""
    if backend.tls is not None and backend.tls.sni is not None:
        return backend.tls.sni
    host = backend.host
    return host if host is not None and not is_ip_literal(host) else None


def _backend_tls_socket(backend: Backend, project: str, *, http2: bool) -> base_pb2.TransportSocket:
    """TLS to the backend, its certificate verified against the backend's CAs (or the system's) and its names
    against the subject alt names asked for, else the SNI name, else the backend's IP address. ALPN offers the
    one protocol the cluster speaks, since gRPC servers refuse a TLS connection that negotiates none. A client
    certificate is named only, fetched over SDS (the key is in no cluster); while this agent does not hold it,
    Envoy has none to present and the backend's handshakes fail rather than go out without it."""
    tls = backend.tls
    assert tls is not None and backend.host is not None
    validation = common_pb2.CertificateValidationContext()
    if tls.ca_certificates is not None:
        validation.trusted_ca.inline_string = tls.ca_certificates
    else:
        validation.trusted_ca.filename = SYSTEM_CA_FILE
    sni = _server_name(backend)
    names = tls.subject_alt_names or ([sni] if sni is not None else [])
    if names:
        validation.match_typed_subject_alt_names.extend(_san(common_pb2.SubjectAltNameMatcher.DNS, n) for n in names)
    else:
        address = _unbracketed(backend.host)
        validation.match_typed_subject_alt_names.append(_san(common_pb2.SubjectAltNameMatcher.IP_ADDRESS, address))
    context = tls_pb2.UpstreamTlsContext(
        common_tls_context=tls_pb2.CommonTlsContext(
            validation_context=validation, alpn_protocols=["h2" if http2 else "http/1.1"]
        )
    )
    if sni is not None:
        context.sni = sni
    if tls.client_certificate_ref is not None:
        context.common_tls_context.tls_certificate_sds_secret_configs.append(
            secret_pb2.SdsSecretConfig(
                name=certificate_secret_name(project, tls.client_certificate_ref), sds_config=ads_source()
            )
        )
    return base_pb2.TransportSocket(name=TLS_TRANSPORT_SOCKET, typed_config=packed(context))


def _san(kind: common_pb2.SubjectAltNameMatcher.SanType, name: str) -> common_pb2.SubjectAltNameMatcher:
    return common_pb2.SubjectAltNameMatcher(san_type=kind, matcher=string_pb2.StringMatcher(exact=name))


def _health_check(check: HealthCheck, host: str | None, *, http2: bool) -> health_check_pb2.HealthCheck:
    """gRPC's health protocol for a gRPC backend, else an HTTP GET of the check's path in the cluster's own
    protocol; either with the backend's name as its authority, every interval even while the backend takes
    no traffic (Envoy would otherwise wait a minute between checks)."""
    health = health_check_pb2.HealthCheck(
        timeout=duration(check.timeout),
        interval=duration(check.interval),
        no_traffic_interval=duration(check.interval),
        healthy_threshold=wrappers_pb2.UInt32Value(value=check.healthy_threshold),
        unhealthy_threshold=wrappers_pb2.UInt32Value(value=check.unhealthy_threshold),
    )
    if check.path is None:
        health.grpc_health_check.service_name = check.grpc_service or ""
        if host is not None:
            health.grpc_health_check.authority = host
        return health
    health.http_health_check.path = check.path
    health.http_health_check.codec_client_type = (
        http_pb2.CodecClientType.HTTP2 if http2 else http_pb2.CodecClientType.HTTP1
    )
    if host is not None:
        health.http_health_check.host = host
    return health


def _outlier_detection(detection: OutlierDetection) -> outlier_detection_pb2.OutlierDetection:
    """One endpoint may always be ejected, whatever the percentage says: a backend often has only one (with
    every endpoint out, Envoy's panic mode sends to them all again rather than failing every request)."""
    return outlier_detection_pb2.OutlierDetection(
        always_eject_one_host=wrappers_pb2.BoolValue(value=True),
        consecutive_5xx=wrappers_pb2.UInt32Value(value=detection.consecutive_5xx),
        interval=duration(detection.interval),
        base_ejection_time=duration(detection.base_ejection_time),
        max_ejection_percent=wrappers_pb2.UInt32Value(value=detection.max_ejection_percent),
    )


def _circuit_breakers(breaker: CircuitBreaker) -> circuit_breaker_pb2.CircuitBreakers:
    """The default-priority thresholds (meshplane sends no high-priority traffic)."""
    thresholds = circuit_breaker_pb2.CircuitBreakers.Thresholds()
    for field in ("max_connections", "max_pending_requests", "max_requests", "max_retries"):
        value = getattr(breaker, field)
        if value is not None:
            getattr(thresholds, field).value = value
    return circuit_breaker_pb2.CircuitBreakers(thresholds=[thresholds])


def inline_cluster(
    name: str, host: str, port: int, *, http2: bool, connect_timeout: duration_pb2.Duration
) -> cluster_pb2.Cluster:
    """A cluster carrying its one endpoint: STATIC for an IP, STRICT_DNS (IPv4 preferred) for a hostname."""
    cluster = _cluster(name, http2=http2, connect_timeout=connect_timeout)
    if is_ip_literal(host):
        cluster.type = cluster_pb2.Cluster.STATIC
    else:
        cluster.type = cluster_pb2.Cluster.STRICT_DNS
        cluster.dns_lookup_family = cluster_pb2.Cluster.V4_PREFERRED
    cluster.load_assignment.CopyFrom(load_assignment(name, _unbracketed(host), port))
    return cluster


def eds_cluster(name: str, *, http2: bool, connect_timeout: duration_pb2.Duration) -> cluster_pb2.Cluster:
    """A cluster whose endpoints come over EDS on the ADS stream."""
    cluster = _cluster(name, http2=http2, connect_timeout=connect_timeout)
    cluster.type = cluster_pb2.Cluster.EDS
    cluster.eds_cluster_config.eds_config.CopyFrom(ads_source())
    return cluster


def load_assignment(name: str, host: str, port: int) -> endpoint_pb2.ClusterLoadAssignment:
    return endpoints_assignment(name, [(host, port)])


def endpoints_assignment(name: str, endpoints: Sequence[tuple[str, int]]) -> endpoint_pb2.ClusterLoadAssignment:
    """The endpoints (host, port) in one locality. The locality is explicit and weighted because gRPC's xDS
    client refuses a locality that is absent and ignores one without a weight; Envoy ignores locality weights
    unless the cluster asks for locality-weighted balancing, which ours do not."""
    locality = endpoint_components_pb2.LocalityLbEndpoints(
        locality=base_pb2.Locality(),
        lb_endpoints=[
            endpoint_components_pb2.LbEndpoint(
                endpoint=endpoint_components_pb2.Endpoint(address=socket_address(host, port))
            )
            for host, port in endpoints
        ],
        load_balancing_weight=wrappers_pb2.UInt32Value(value=1),
    )
    return endpoint_pb2.ClusterLoadAssignment(cluster_name=name, endpoints=[locality])


@functools.lru_cache(maxsize=65536)
def is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(_unbracketed(host))
    except ValueError:
        return False
    return True


def _cluster(name: str, *, http2: bool, connect_timeout: duration_pb2.Duration) -> cluster_pb2.Cluster:
    """Pins the upstream protocol explicitly: HTTP/2 for http2 and gRPC backends, HTTP/1.1 otherwise."""
    explicit = http_protocol_options_pb2.HttpProtocolOptions.ExplicitHttpConfig()
    if http2:
        explicit.http2_protocol_options.CopyFrom(protocol_pb2.Http2ProtocolOptions())
    else:
        explicit.http_protocol_options.CopyFrom(protocol_pb2.Http1ProtocolOptions())
    options = packed(http_protocol_options_pb2.HttpProtocolOptions(explicit_http_config=explicit))
    return cluster_pb2.Cluster(
        name=name, connect_timeout=connect_timeout, typed_extension_protocol_options={HTTP_PROTOCOL_OPTIONS: options}
    )


def _unbracketed(host: str) -> str:
    """`[::1]` as users may write an IPv6 literal, `::1` as Envoy wants it."""
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host
