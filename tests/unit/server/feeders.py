"""A projection feeder on a store, run for the length of a test, and the API documents it feeds."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from meshplane.model.registry import REGISTRY
from meshplane.server.feeder import ProjectionFeeder
from meshplane.server.manifests import ManifestProjection
from meshplane.server.projection import FleetProjection
from meshplane.store.store import Store
from meshplane.xds.cache import ResourceCache

API_TYPE = REGISTRY.get("API").type_url


def api_spec(port: int) -> dict:
    return {"basePath": "/orders", "backends": [{"host": "127.0.0.1", "port": port}]}


def feeder_of(store: Store) -> tuple[ResourceCache, ProjectionFeeder]:
    """A feeder of `store` that polls fast, and the cache it fills."""
    cache = ResourceCache()
    return cache, ProjectionFeeder(store, FleetProjection(cache), ManifestProjection(cache), poll_interval=0.05)


@contextlib.asynccontextmanager
async def running(feeder: ProjectionFeeder) -> AsyncIterator[None]:
    """The feeder's loop, for as long as the block lasts."""
    task = asyncio.create_task(feeder.run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
