"""Hooks a server owner can attach to ADS streams, e.g. to record which node holds what."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from envoy.config.core.v3.base_pb2 import Node


class StreamCallbacks(Protocol):
    """Stream lifecycle and ACK/NACK notifications; awaited inline, so keep them quick."""

    async def on_stream_open(self, node: Node, group: str, delta: bool) -> None: ...

    async def on_stream_close(self, node: Node, group: str) -> None: ...

    async def on_ack(self, group: str, node: Node, type_url: str, versions: Mapping[str, str]) -> None:
        """``versions``: name -> version the node now holds of that type (a read-only view; copy to keep)."""
        ...

    async def on_nack(self, group: str, node: Node, type_url: str, versions: Mapping[str, str], message: str) -> None:
        """``versions``: the name -> version the node rejected; ``message`` is its error detail."""
        ...


class NoCallbacks:
    """No-op hooks; subclass and override only what you need."""

    async def on_stream_open(self, node: Node, group: str, delta: bool) -> None:
        return None

    async def on_stream_close(self, node: Node, group: str) -> None:
        return None

    async def on_ack(self, group: str, node: Node, type_url: str, versions: Mapping[str, str]) -> None:
        return None

    async def on_nack(self, group: str, node: Node, type_url: str, versions: Mapping[str, str], message: str) -> None:
        return None
