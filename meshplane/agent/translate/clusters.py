"""Upstream clusters: one per serving backend, plus the endpoints of those Envoy learns over EDS."""

from __future__ import annotations

import ipaddress

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import base_pb2, protocol_pb2
from envoy.config.endpoint.v3 import endpoint_components_pb2, endpoint_pb2
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2
from google.protobuf import duration_pb2, wrappers_pb2

from meshplane.agent.translate.common import ads_source, duration, packed, socket_address
from meshplane.model.kinds import Backend, BackendProtocol

HTTP_PROTOCOL_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
BACKEND_CONNECT_TIMEOUT = "5s"


def backend_resources(
    name: str, backend: Backend
) -> tuple[cluster_pb2.Cluster, endpoint_pb2.ClusterLoadAssignment | None]:
    """An IP backend is an EDS cluster plus its endpoints (so a move is an endpoint update, not a new cluster);
    a hostname backend is a STRICT_DNS cluster that Envoy keeps resolving itself, with no EDS resource."""
    host = backend.host
    assert host is not None, "service backends are given a host before they are translated"
    http2 = backend.protocol is not BackendProtocol.HTTP
    connect_timeout = duration(BACKEND_CONNECT_TIMEOUT)
    if not is_ip_literal(host):
        return inline_cluster(name, host, backend.port, http2=http2, connect_timeout=connect_timeout), None
    cluster = _cluster(name, http2=http2, connect_timeout=connect_timeout)
    cluster.type = cluster_pb2.Cluster.EDS
    cluster.eds_cluster_config.eds_config.CopyFrom(ads_source())
    return cluster, load_assignment(name, _unbracketed(host), backend.port)


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


def load_assignment(name: str, host: str, port: int) -> endpoint_pb2.ClusterLoadAssignment:
    """One endpoint in one locality. The locality is explicit and weighted because gRPC's xDS client refuses
    a locality that is absent and ignores one without a weight; Envoy ignores locality weights unless the
    cluster asks for locality-weighted balancing, which ours do not."""
    endpoint = endpoint_components_pb2.LbEndpoint(
        endpoint=endpoint_components_pb2.Endpoint(address=socket_address(host, port))
    )
    locality = endpoint_components_pb2.LocalityLbEndpoints(
        locality=base_pb2.Locality(),
        lb_endpoints=[endpoint],
        load_balancing_weight=wrappers_pb2.UInt32Value(value=1),
    )
    return endpoint_pb2.ClusterLoadAssignment(cluster_name=name, endpoints=[locality])


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
