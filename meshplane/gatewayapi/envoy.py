"""The xDS side: per Gateway and port one Envoy listener on the Gateway's address (HTTPS: a filter chain per
Gateway listener, picked by SNI), route tables whose virtual hosts hold the attached routes by precedence,
EDS clusters and endpoints of the backends, and the certificates as SDS secrets. Every name starts `gwapi/`.

A request's Host picks the most specific Gateway listener hostname that matches it (the specification's
rule for listeners sharing a port), then, among the routes attached there, those whose hostnames match it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import base_pb2
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.config.listener.v3 import listener_components_pb2, listener_pb2
from envoy.config.route.v3 import route_components_pb2, route_pb2
from envoy.extensions.filters.http.cors.v3 import cors_pb2
from envoy.extensions.filters.listener.tls_inspector.v3 import tls_inspector_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.extensions.transport_sockets.tls.v3 import common_pb2, secret_pb2, tls_pb2
from google.protobuf.message import Message

from meshplane.agent.translate.access import CORS
from meshplane.agent.translate.clusters import BACKEND_CONNECT_TIMEOUT, eds_cluster, endpoints_assignment
from meshplane.agent.translate.common import ads_source, duration, packed, socket_address
from meshplane.agent.translate.config import GatewaySettings
from meshplane.agent.translate.gateways import SECRET_TYPE, TLS_INSPECTOR, TLS_SOCKET
from meshplane.agent.translate.listener import HCM_FILTER, connection_manager
from meshplane.gatewayapi.backends import Backend
from meshplane.gatewayapi.hostnames import ANY, matches, specificity
from meshplane.gatewayapi.objects import Listener
from meshplane.gatewayapi.rules import SortKey
from meshplane.gatewayapi.state import CertificatePair, ObjectKey

LISTENER_TYPE = "type.googleapis.com/envoy.config.listener.v3.Listener"
ROUTE_TYPE = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
CLUSTER_TYPE = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
ENDPOINT_TYPE = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
PREFIX = "gwapi"


@dataclass(frozen=True)
class AttachedRoute:
    """A route's Envoy routes on one listener, for the hostnames it serves there."""

    hostnames: tuple[str, ...]
    entries: tuple[tuple[SortKey, route_components_pb2.Route], ...]


@dataclass(frozen=True)
class ServedListener:
    listener: Listener
    certificates: tuple[ObjectKey, ...]
    routes: tuple[AttachedRoute, ...]


def secret_name(key: ObjectKey) -> str:
    return f"{PREFIX}/{key[0]}/{key[1]}"


def gateway_resources(
    gateway: ObjectKey, address: str, served: Sequence[ServedListener]
) -> tuple[list[listener_pb2.Listener], list[route_pb2.RouteConfiguration]]:
    """The listeners and route tables of one Gateway, one listener per port."""
    by_port: dict[int, list[ServedListener]] = defaultdict(list)
    for entry in served:
        by_port[entry.listener.port].append(entry)
    listeners, tables = [], []
    for port, sharing in sorted(by_port.items()):
        name = f"{PREFIX}/{gateway[0]}/{gateway[1]}/{port}"
        envoy = listener_pb2.Listener(name=name, address=socket_address(address, port))
        if sharing[0].listener.protocol == "HTTPS":
            envoy.listener_filters.append(
                listener_components_pb2.ListenerFilter(
                    name=TLS_INSPECTOR, typed_config=packed(tls_inspector_pb2.TlsInspector())
                )
            )
            for entry in sorted(sharing, key=lambda entry: entry.listener.name):
                table = f"{name}/{entry.listener.name}"
                chain = _chain(name, table)
                chain.name = table
                if entry.listener.hostname is not None:
                    chain.filter_chain_match.server_names.append(entry.listener.hostname)
                chain.transport_socket.CopyFrom(_tls_socket(entry.certificates))
                envoy.filter_chains.append(chain)
                tables.append(route_table(table, [entry]))
        else:
            envoy.filter_chains.append(_chain(name, name))
            tables.append(route_table(name, sharing))
        listeners.append(envoy)
    return listeners, tables


def _chain(listener: str, table: str) -> listener_components_pb2.FilterChain:
    """The gateway's connection manager, except that Host keeps its port (the specification ignores the port
    when matching hostnames, as the route table does, but the backend must see the Host the client sent) and
    WebSocket upgrades pass through to the backend (a `kubernetes.io/ws` port expects them). The CORS filter
    acts only on routes with a CORS policy."""
    cors = hcm_pb2.HttpFilter(name=CORS, typed_config=packed(cors_pb2.Cors()))
    manager = connection_manager(GatewaySettings(listener_name=listener, route_config_name=table), [cors])
    manager.strip_any_host_port = False
    manager.upgrade_configs.append(hcm_pb2.HttpConnectionManager.UpgradeConfig(upgrade_type="websocket"))
    return listener_components_pb2.FilterChain(
        filters=[listener_components_pb2.Filter(name=HCM_FILTER, typed_config=packed(manager))]
    )


def _tls_socket(certificates: Iterable[ObjectKey]) -> base_pb2.TransportSocket:
    common = tls_pb2.CommonTlsContext(
        alpn_protocols=["h2", "http/1.1"],
        tls_certificate_sds_secret_configs=[
            secret_pb2.SdsSecretConfig(name=secret_name(key), sds_config=ads_source()) for key in certificates
        ],
    )
    return base_pb2.TransportSocket(
        name=TLS_SOCKET, typed_config=packed(tls_pb2.DownstreamTlsContext(common_tls_context=common))
    )


def route_table(name: str, served: Sequence[ServedListener]) -> route_pb2.RouteConfiguration:
    """A virtual host per hostname: the routes of the most specific listener matching it (each listener's
    own hostname has one, so a host it matches never falls to a broader listener's routes). Within it, the
    rules of routes with a more specific matching hostname come first, then the match precedence."""
    domains = {entry.listener.hostname or ANY for entry in served}
    domains |= {hostname for entry in served for route in entry.routes for hostname in route.hostnames}
    hosts = []
    for domain in sorted(domains, key=lambda domain: (specificity(domain), domain)):
        owner = _owner(domain, served)
        if owner is None:
            continue
        ranked = []
        for route in owner.routes:
            matching = [specificity(hostname) for hostname in route.hostnames if matches(hostname, domain)]
            if matching:
                ranked += [((min(matching), key), entry) for key, entry in route.entries]
        routes = sorted(ranked, key=lambda entry: entry[0])
        hosts.append(
            route_components_pb2.VirtualHost(name=domain, domains=[domain], routes=[route for _, route in routes])
        )
    return route_pb2.RouteConfiguration(name=name, virtual_hosts=hosts, ignore_port_in_host_matching=True)


def _owner(domain: str, served: Sequence[ServedListener]) -> ServedListener | None:
    """The listener with the most specific hostname matching all of `domain`'s hosts."""
    candidates = [entry for entry in served if matches(entry.listener.hostname or ANY, domain)]
    return min(candidates, key=lambda entry: specificity(entry.listener.hostname or ANY), default=None)


def backend_resources(
    backends: Mapping[str, Backend],
) -> tuple[list[cluster_pb2.Cluster], list[endpoint_pb2.ClusterLoadAssignment]]:
    timeout = duration(BACKEND_CONNECT_TIMEOUT)
    clusters = [eds_cluster(name, http2=backends[name].http2, connect_timeout=timeout) for name in sorted(backends)]
    endpoints = [endpoints_assignment(name, backends[name].endpoints) for name in sorted(backends)]
    return clusters, endpoints


def certificate_secret(key: ObjectKey, pair: CertificatePair) -> secret_pb2.Secret:
    certificate = common_pb2.TlsCertificate(
        certificate_chain=base_pb2.DataSource(inline_string=pair.certificate),
        private_key=base_pb2.DataSource(inline_string=pair.private_key),
    )
    return secret_pb2.Secret(name=secret_name(key), tls_certificate=certificate)


def by_type(
    listeners: Sequence[listener_pb2.Listener],
    tables: Sequence[route_pb2.RouteConfiguration],
    clusters: Sequence[cluster_pb2.Cluster],
    endpoints: Sequence[endpoint_pb2.ClusterLoadAssignment],
    secrets: Sequence[secret_pb2.Secret],
) -> dict[str, dict[str, Message]]:
    """Type URL → name → resource, each sorted by name."""
    resources: dict[str, dict[str, Message]] = {
        LISTENER_TYPE: {listener.name: listener for listener in listeners},
        ROUTE_TYPE: {table.name: table for table in tables},
        CLUSTER_TYPE: {cluster.name: cluster for cluster in clusters},
        ENDPOINT_TYPE: {assignment.cluster_name: assignment for assignment in endpoints},
        SECRET_TYPE: {secret.name: secret for secret in secrets},
    }
    return {type_url: dict(sorted(named.items())) for type_url, named in resources.items()}
