"""The enforcer's settings: flags, `MESHPLANE_*` variables and the TOML file, like every process."""

from __future__ import annotations

from pydantic import Field

from meshplane.config import Address, DataPlaneServiceSettings


class EnforcerSettings(DataPlaneServiceSettings):
    role = "enforcer"
    grpc_address: Address = Field(default="127.0.0.1:18081", description="where gateways call ext_authz")
