"""HTTP filters whose config arrives over ADS as its own resource (ECDS), so the listener never changes with it.

A listener change drains every open connection; a discovered filter's config is swapped in for new requests
while connections stay open. Each such filter names the resource it follows (its own name, which is also the
key of its per-route config) and carries a default that holds until the first config arrives, so Envoy never
waits on it: the defaults refuse rather than let through (see the callers).
"""

from __future__ import annotations

from envoy.config.core.v3 import config_source_pb2, extension_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from google.protobuf.message import Message

from meshplane.agent.translate.common import ads_source, packed

EXTENSION_CONFIG_TYPE = "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig"


def discovered_filter(name: str, default: Message) -> hcm_pb2.HttpFilter:
    """A filter whose config is the extension config resource `name`, of `default`'s type."""
    return hcm_pb2.HttpFilter(
        name=name,
        config_discovery=config_source_pb2.ExtensionConfigSource(
            config_source=ads_source(),
            default_config=packed(default),
            apply_default_config_without_warming=True,
            type_urls=[f"type.googleapis.com/{default.DESCRIPTOR.full_name}"],
        ),
    )


def extension_config(name: str, config: Message) -> extension_pb2.TypedExtensionConfig:
    """The resource a discovered filter named `name` follows."""
    return extension_pb2.TypedExtensionConfig(name=name, typed_config=packed(config))
