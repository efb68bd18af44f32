"""Delta sync between the server and an agent: a reconnecting agent receives only the difference."""

from __future__ import annotations

from pathlib import Path

import httpx

from meshplane_testing.meshplane import run_server
from meshplane_testing.sync_probe import API_TYPE, SyncProbe


def api(name: str, port: int = 9001, cluster: str | None = None) -> dict:
    spec: dict = {"basePath": f"/{name}", "backends": [{"host": "127.0.0.1", "port": port}]}
    if cluster:
        spec["placement"] = {"clusters": [cluster]}
    return {"kind": "API", "metadata": {"name": name, "project": "default"}, "spec": spec}


async def put(http: httpx.AsyncClient, doc: dict) -> None:
    response = await http.put(f"/v1/projects/default/apis/{doc['metadata']['name']}", json=doc)
    assert response.status_code in (200, 201), response.text


async def test_reconnecting_agent_receives_only_what_changed_and_the_names_removed(tmp_path: Path) -> None:
    with run_server(tmp_path) as server:
        async with httpx.AsyncClient(base_url=server.url, headers=server.headers, timeout=10) as http:
            for name in ("alpha", "bravo", "charlie"):
                await put(http, api(name))
            await put(http, api("elsewhere", cluster="edge-2"))
            probe = SyncProbe(server.grpc_address, "edge-1", credentials=server.agent_credentials("edge-1"))
            await probe.register()
            await probe.sync_until(lambda p: p.names() == {"default/alpha", "default/bravo", "default/charlie"})
            before = dict(probe.held[API_TYPE])

            # While the agent is away: one change, one deletion, one addition.
            await put(http, api("bravo", port=9002))
            assert (await http.delete("/v1/projects/default/apis/charlie")).status_code == 200
            await put(http, api("delta"))

            probe.updates.clear()
            expected = {"default/alpha", "default/bravo", "default/delta"}
            await probe.sync_until(
                lambda p: p.names() == expected and p.held[API_TYPE]["default/bravo"] != before["default/bravo"]
            )

    # APIs only: the first sync stopped once the APIs were in, so other types may have come after it.
    api_updates = [u for u in probe.updates if u.type_url == API_TYPE]
    sent = [r.name for u in api_updates for r in u.upserts]
    removed = [name for u in api_updates for name in u.removed]
    assert sorted(sent) == ["default/bravo", "default/delta"]
    assert removed == ["default/charlie"]
    assert probe.held[API_TYPE]["default/alpha"] == before["default/alpha"]


async def test_an_agent_receives_only_objects_placed_on_its_cluster(tmp_path: Path) -> None:
    with run_server(tmp_path) as server:
        async with httpx.AsyncClient(base_url=server.url, headers=server.headers, timeout=10) as http:
            await put(http, api("everywhere"))
            await put(http, api("only-two", cluster="edge-2"))
            one, two = (
                SyncProbe(server.grpc_address, name, credentials=server.agent_credentials(name))
                for name in ("edge-1", "edge-2")
            )
            for probe in (one, two):
                await probe.register()
            await one.sync_until(lambda p: "default/everywhere" in p.names())
            await two.sync_until(lambda p: p.names() == {"default/everywhere", "default/only-two"})
    assert one.names() == {"default/everywhere"}
