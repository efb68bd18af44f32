"""Clients of the north API for tests: `MeshplaneClient` itself, blocking for sync tests, or on an in-process app."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import httpx
from fastapi import FastAPI

from meshplane.client import MeshplaneClient, Target, object_path


@asynccontextmanager
async def north_client(app: FastAPI, projects: Iterable[str]) -> AsyncIterator[httpx.AsyncClient]:
    """A client of `app`, which holds `projects` once it is handed over."""
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test", timeout=10) as http:
        for project in projects:
            created = await http.post(
                "/v1/projects", json={"kind": "Project", "metadata": {"name": project}, "spec": {}}
            )
            assert created.status_code == 201, created.text
        yield http


def put(http: httpx.Client, doc: dict[str, Any]) -> dict[str, Any]:
    """Create or replace `doc` where its kind, project and name say, asserting the server took it; the stored object.

    For tests that hold a plain client of the north API (one signed in as someone in particular, say);
    `MeshplaneClient.put` does the same where a test holds that.
    """
    target = Target.of(doc, None)
    response = http.put(object_path(target.info, target.project, target.name), json=doc)
    assert response.status_code in (200, 201), response.text
    return response.json()


class BlockingClient:
    """A `MeshplaneClient` for a test that runs no event loop: each call runs to its end on a loop of its own."""

    def __init__(self, client: MeshplaneClient, runner: asyncio.Runner):
        self.client = client
        self._runner = runner

    def __getattr__(self, name: str) -> Any:
        call = getattr(self.client, name)
        if not inspect.iscoroutinefunction(call):
            return call
        return lambda *args, **kwargs: self._runner.run(call(*args, **kwargs))


@contextmanager
def blocking(client: MeshplaneClient) -> Iterator[BlockingClient]:
    """`client`'s calls as plain ones (`north.put(doc)`), closed at the end."""
    with asyncio.Runner() as runner:
        try:
            yield BlockingClient(client, runner)
        finally:
            runner.run(client.http.aclose())
