"""The gateway's one listener: an HTTP connection manager whose routes arrive over ADS (RDS)."""

from __future__ import annotations

from collections.abc import Sequence

from envoy.config.accesslog.v3 import accesslog_pb2
from envoy.config.listener.v3 import listener_components_pb2, listener_pb2
from envoy.extensions.filters.http.router.v3 import router_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from google.protobuf import wrappers_pb2

from meshplane.agent.translate.common import ads_source, packed, socket_address
from meshplane.agent.translate.config import GatewaySettings

HCM_FILTER = "envoy.filters.network.http_connection_manager"
ROUTER_FILTER = "envoy.filters.http.router"


def gateway_listener(
    settings: GatewaySettings,
    filters: Sequence[hcm_pb2.HttpFilter] = (),
    local_reply: hcm_pb2.LocalReplyConfig | None = None,
    access_logs: Sequence[accesslog_pb2.AccessLog] = (),
) -> listener_pb2.Listener:
    """The gateway's HTTP listener at the settings' address (see `connection_manager`)."""
    return listener_pb2.Listener(
        name=settings.listener_name,
        address=socket_address(settings.listener_address, settings.listener_port),
        filter_chains=[
            listener_components_pb2.FilterChain(
                filters=[
                    listener_components_pb2.Filter(
                        name=HCM_FILTER,
                        typed_config=packed(connection_manager(settings, filters, local_reply, access_logs)),
                    )
                ]
            )
        ],
    )


def connection_manager(
    settings: GatewaySettings,
    filters: Sequence[hcm_pb2.HttpFilter] = (),
    local_reply: hcm_pb2.LocalReplyConfig | None = None,
    access_logs: Sequence[accesslog_pb2.AccessLog] = (),
) -> hcm_pb2.HttpConnectionManager:
    """The HTTP connection manager of every gateway listener. Paths are normalized and slashes merged before
    matching, so `/orders/../admin` or `//admin` cannot reach a route meant for something else; the port in
    Host is ignored when picking a virtual host.
    `filters` (checks and limits) run in order before the router; they must not change with the catalog,
    since a listener change drains every open connection. `access_logs` write a line per request.

    The gateway is the edge: the client address is the connection's peer (or, behind `xff_num_trusted_hops`
    proxies of the operator's, the address the outermost of them appended), which is what the upstream finds
    last in x-forwarded-for and in x-envoy-external-address, and what logs and source checks see. A caller's
    own x-envoy-* headers (timeouts, retries) are dropped, since no address is configured as internal."""
    manager = hcm_pb2.HttpConnectionManager(
        stat_prefix=settings.listener_name,
        codec_type=hcm_pb2.HttpConnectionManager.AUTO,
        rds=hcm_pb2.Rds(config_source=ads_source(), route_config_name=settings.route_config_name),
        http_filters=[*filters, router_filter()],
        normalize_path=wrappers_pb2.BoolValue(value=True),
        merge_slashes=True,
        strip_any_host_port=True,
        use_remote_address=wrappers_pb2.BoolValue(value=True),
        xff_num_trusted_hops=settings.xff_num_trusted_hops,
    )
    if local_reply is not None:
        manager.local_reply_config.CopyFrom(local_reply)
    manager.access_log.extend(access_logs)
    return manager


def router_filter() -> hcm_pb2.HttpFilter:
    """The terminal HTTP filter; Envoy and gRPC both want it last in the chain."""
    return hcm_pb2.HttpFilter(name=ROUTER_FILTER, typed_config=packed(router_pb2.Router()))
