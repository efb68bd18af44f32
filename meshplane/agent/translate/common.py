"""Proto pieces that several resource builders share."""

from __future__ import annotations

from envoy.config.core.v3 import address_pb2, config_source_pb2
from google.protobuf import any_pb2, duration_pb2
from google.protobuf.message import Message

from meshplane.model.durations import duration_seconds


def ads_source() -> config_source_pb2.ConfigSource:
    """Fetch a dependent resource over the same ADS stream, so updates arrive in one ordered flow."""
    return config_source_pb2.ConfigSource(
        ads=config_source_pb2.AggregatedConfigSource(),
        resource_api_version=config_source_pb2.ApiVersion.V3,
    )


def duration(text: str) -> duration_pb2.Duration:
    """A user duration (`15s`, `250ms`) as a proto Duration, exact to the nanosecond."""
    value = duration_pb2.Duration()
    value.FromNanoseconds(round(duration_seconds(text) * 1e9))
    return value


def socket_address(host: str, port: int) -> address_pb2.Address:
    return address_pb2.Address(socket_address=address_pb2.SocketAddress(address=host, port_value=port))


def packed(message: Message) -> any_pb2.Any:
    """A message as a typed_config / protocol-options Any."""
    value = any_pb2.Any()
    value.Pack(message)
    return value
