"""The enforcer's settings: flags, `MESHPLANE_*` variables and the TOML file, like every process."""

from __future__ import annotations

import os
import socket

from pydantic import Field

from meshplane.config import Address, ProcessSettings


def _default_node_id() -> str:
    return f"enforcer-{socket.gethostname()}-{os.getpid()}"


class EnforcerSettings(ProcessSettings):
    grpc_address: Address = Field(default="127.0.0.1:18081", description="where gateways call ext_authz")
    xds_address: Address = Field(default="127.0.0.1:18001", description="the local agent's xDS")
    node_id: str = Field(default_factory=_default_node_id, min_length=1, description="xDS node id for the agent")
    metrics_address: Address | None = Field(default=None, description="serve Prometheus /metrics here; default off")
