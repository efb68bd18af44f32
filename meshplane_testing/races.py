"""Writes that reach running servers together, to test what happens when they race."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import httpx

from meshplane_testing import documents
from meshplane_testing.meshplane import ServerProcess


def object_path(doc: dict[str, Any]) -> str:
    """The REST path of an object document: under its project, or at the top for cluster-wide kinds."""
    kind = doc["kind"].lower() + "s"
    meta = doc["metadata"]
    return (
        f"/v1/projects/{meta['project']}/{kind}/{meta['name']}" if "project" in meta else f"/v1/{kind}/{meta['name']}"
    )


def rival_apis(project: str, count: int, base_path: str = "/orders") -> list[dict[str, Any]]:
    """`count` APIs under one basePath: at most one of them may be accepted."""
    return [documents.api(f"orders-{n}", project=project, basePath=base_path) for n in range(count)]


def race_puts(servers: Sequence[ServerProcess], docs: Sequence[dict[str, Any]]) -> list[int]:
    """PUT every document at once, the n-th to servers[n % len(servers)], each over a connection opened
    beforehand so the writes arrive together; the status codes, in the documents' order."""

    async def race() -> list[int]:
        clients = [httpx.AsyncClient(base_url=s.url, headers=s.headers, timeout=10) for s in servers]
        try:
            await asyncio.gather(*(clients[n % len(clients)].get("/v1/projects") for n in range(len(docs))))
            responses = await asyncio.gather(
                *(clients[n % len(clients)].put(object_path(doc), json=doc) for n, doc in enumerate(docs))
            )
        finally:
            for client in clients:
                await client.aclose()
        return [response.status_code for response in responses]

    return asyncio.run(race())
