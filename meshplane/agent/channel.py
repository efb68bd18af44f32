"""The agent's channel to the control plane, renewed when its certificate files change.

Given several server replicas (`--server ip:port,ip:port`, or one name with several A records), each agent
starts at one of its own choosing, so a fleet spreads over the replicas, and moves to another when the one it
is on goes: gRPC's pick_first over the shuffled list. Every call of an agent goes to the one replica, so its
sync stream and its reports meet the same server.
"""

from __future__ import annotations

import ipaddress
import json

import grpc

from meshplane.config import AgentSettings, split_address
from meshplane.observability.grpc_tracing import TraceUnaryCalls
from meshplane.observability.logging import get_logger
from meshplane.security.tls import INSECURE_WARNING, AgentCredentials, agent_channel_options
from meshplane.xds.client import RECONNECT_CHANNEL_OPTIONS

log = get_logger("meshplane.agent")

SPREAD_OVER_REPLICAS = json.dumps([{"pick_first": {"shuffleAddressList": True}}])
"""The channel's load-balancing config: the first replica tried is each agent's own, the next on failure."""


def channel_target(server: str) -> str:
    """The gRPC target of the agent's `--server`: one address as given (DNS finds every replica behind a
    name), several IP addresses as one `ipv4:` or `ipv6:` list."""
    addresses = server.split(",")
    if len(addresses) == 1:
        return server
    first = split_address(addresses[0])[0]
    return f"ipv{ipaddress.ip_address(first).version}:{server}"


def server_config(service_config: str) -> str:
    """The retry policy's service config with the spread over replicas."""
    return json.dumps({**json.loads(service_config), "loadBalancingConfig": json.loads(SPREAD_OVER_REPLICAS)})


class ControlPlaneChannel:
    """mTLS unless told otherwise; TlsConfigError (no certificate configured) stops the agent when this is
    made. Credentials handed in are kept as they are; those from the settings' files follow the files."""

    def __init__(self, settings: AgentSettings, credentials: grpc.ChannelCredentials | None = None):
        self.settings = settings
        self._tls = None if credentials is not None else AgentCredentials(settings)
        self.credentials = credentials or (self._tls.current if self._tls is not None else None)
        self._channel = self._open()
        self._superseded: list[grpc.aio.Channel] = []

    def _open(self) -> grpc.aio.Channel:
        options = [
            ("grpc.keepalive_time_ms", 20_000),
            ("grpc.keepalive_timeout_ms", 10_000),
            ("grpc.http2.ping_timeout_ms", 10_000),
            ("grpc.enable_retries", 1),
            ("grpc.service_config", server_config(self.settings.retry.service_config("meshplane.v1.ControlPlane"))),
            *RECONNECT_CHANNEL_OPTIONS,
            *agent_channel_options(self.settings),
        ]
        interceptors = [TraceUnaryCalls()]
        target = channel_target(self.settings.server)
        if self.credentials is None:
            log.warning(INSECURE_WARNING)
            return grpc.aio.insecure_channel(target, options=options, interceptors=interceptors)
        return grpc.aio.secure_channel(target, self.credentials, options=options, interceptors=interceptors)

    def __call__(self) -> grpc.aio.Channel:
        """The channel new calls to the server go on: a new one once the certificate files changed, so new
        connections carry the new certificate while the sync stream on the old channel goes on (the sync
        client closes that channel when it reconnects)."""
        renewed = self._tls.renewed() if self._tls is not None else None
        if renewed is not None:
            self.credentials = renewed
            self._superseded.append(self._channel)
            self._channel = self._open()
        return self._channel

    async def close(self) -> None:
        for channel in (*self._superseded, self._channel):
            await channel.close()
