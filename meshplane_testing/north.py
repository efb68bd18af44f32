"""The north API served in process, for tests that need no server process."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI


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
