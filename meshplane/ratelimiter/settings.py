"""Configuration of the rate-limiter process, loaded like every other process's (`--config`, MESHPLANE_*, flags)."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit, urlunsplit

from pydantic import AfterValidator, Field

from meshplane.config import Address, DataPlaneServiceSettings

_REDIS_SCHEMES = ("redis", "rediss", "unix")


def _redis_url(value: str) -> str:
    if urlsplit(value).scheme not in _REDIS_SCHEMES:
        raise ValueError(f"{value!r} is not a Redis URL (redis://host:port/db, rediss://… or unix://…)")
    return value


def redacted(url: str) -> str:
    """`url` without its user and password, for logs."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


class RateLimiterSettings(DataPlaneServiceSettings):
    role = "ratelimiter"
    grpc_address: Address = Field(default="127.0.0.1:18082", description="RateLimitService gRPC for Envoy")
    redis_url: Annotated[str, AfterValidator(_redis_url)] | None = Field(
        default=None, description="shared counters in Redis; default: in this process's memory"
    )
    redis_timeout: float = Field(default=0.5, gt=0, description="seconds one Redis round trip may take")
