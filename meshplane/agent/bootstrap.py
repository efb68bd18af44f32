"""The Envoy bootstrap the agent starts its gateway with: everything but the xDS server's address comes over ADS."""

from __future__ import annotations

import json
from typing import Any

import yaml
from google.protobuf import json_format
from google.protobuf.message import Message

from meshplane.agent.translate.clusters import inline_cluster
from meshplane.agent.translate.common import ads_source, duration

XDS_CLUSTER = "meshplane-xds"
RE2_MAX_PROGRAM_SIZE = 65536
"""Envoy refuses regexes whose RE2 program exceeds 100 by default; operation paths compile to linear
regexes about as long as the path, so the limit is raised well past any path a request header can carry."""


def envoy_bootstrap(
    node_id: str,
    xds_host: str,
    xds_port: int,
    *,
    cluster: str = "meshplane-gateway",
    admin_port: int | None = 19000,
) -> dict[str, Any]:
    """Listeners and clusters (and through them routes and endpoints) over one ADS gRPC stream."""
    xds = inline_cluster(XDS_CLUSTER, xds_host, xds_port, http2=True, connect_timeout=duration("1s"))
    bootstrap: dict[str, Any] = {
        "node": {"id": node_id, "cluster": cluster},
        "dynamic_resources": {
            "ads_config": {
                "api_type": "GRPC",
                "transport_api_version": "V3",
                "set_node_on_first_message_only": True,
                "grpc_services": [{"envoy_grpc": {"cluster_name": XDS_CLUSTER}}],
            },
            "lds_config": _as_dict(ads_source()),
            "cds_config": _as_dict(ads_source()),
        },
        "static_resources": {"clusters": [_as_dict(xds)]},
        # No stats sink is configured: a flush only latches the stats for whoever reads them next, so it is
        # done when the admin is asked (the figures reading, a scrape) instead of every 5 s over every stat
        # (at 10,000 APIs, 32 ms/s of an idle gateway's CPU against 4 ms/s).
        "stats_flush_on_admin": True,
        "layered_runtime": {
            "layers": [
                {"name": "meshplane", "static_layer": {"re2.max_program_size.error_level": RE2_MAX_PROGRAM_SIZE}}
            ]
        },
    }
    if admin_port is not None:
        bootstrap["admin"] = {"address": {"socket_address": {"address": "127.0.0.1", "port_value": admin_port}}}
    return bootstrap


def bootstrap_yaml(
    node_id: str,
    xds_host: str,
    xds_port: int,
    *,
    cluster: str = "meshplane-gateway",
    admin_port: int | None = 19000,
) -> str:
    """The bootstrap as the YAML file Envoy's `-c` reads."""
    return yaml.safe_dump(
        envoy_bootstrap(node_id, xds_host, xds_port, cluster=cluster, admin_port=admin_port), sort_keys=False
    )


def _as_dict(message: Message) -> dict[str, Any]:
    """Plain dicts and lists (MessageToDict leaves OrderedDicts in Anys, which safe_dump refuses)."""
    return json.loads(json_format.MessageToJson(message, preserving_proto_field_name=True))
