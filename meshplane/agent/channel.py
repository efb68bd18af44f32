"""The agent's channel to the control plane, renewed when its certificate files change."""

from __future__ import annotations

import grpc

from meshplane.config import AgentSettings
from meshplane.observability.grpc_tracing import TraceUnaryCalls
from meshplane.observability.logging import get_logger
from meshplane.security.tls import INSECURE_WARNING, AgentCredentials, agent_channel_options
from meshplane.xds.client import RECONNECT_CHANNEL_OPTIONS

log = get_logger("meshplane.agent")


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
            ("grpc.service_config", self.settings.retry.service_config("meshplane.v1.ControlPlane")),
            *RECONNECT_CHANNEL_OPTIONS,
            *agent_channel_options(self.settings),
        ]
        interceptors = [TraceUnaryCalls()]
        if self.credentials is None:
            log.warning(INSECURE_WARNING)
            return grpc.aio.insecure_channel(self.settings.server, options=options, interceptors=interceptors)
        return grpc.aio.secure_channel(
            self.settings.server, self.credentials, options=options, interceptors=interceptors
        )

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
