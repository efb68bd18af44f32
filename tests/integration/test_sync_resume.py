"""Delta sync between the server and an agent: a reconnecting agent receives only the difference."""

from __future__ import annotations

from pathlib import Path

from meshplane_testing.documents import api, backend
from meshplane_testing.meshplane import run_server
from meshplane_testing.sync_probe import API_TYPE, SyncProbe


async def test_reconnecting_agent_receives_only_what_changed_and_the_names_removed(tmp_path: Path) -> None:
    with run_server(tmp_path) as server:
        async with server.client() as north:
            for name in ("alpha", "bravo", "charlie"):
                await north.put(api(name))
            await north.put(api("elsewhere", placement={"clusters": ["edge-2"]}))
            probe = SyncProbe(server.grpc_address, "edge-1", credentials=server.agent_credentials("edge-1"))
            await probe.register()
            await probe.sync_until(lambda p: p.names() == {"default/alpha", "default/bravo", "default/charlie"})
            before = dict(probe.held[API_TYPE])

            # While the agent is away: one change, one deletion, one addition.
            await north.put(api("bravo", backends=[backend(9002)]))
            assert (await north.http.delete("/v1/projects/default/apis/charlie")).status_code == 200
            await north.put(api("delta"))

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
        async with server.client() as north:
            await north.put(api("everywhere"))
            await north.put(api("only-two", placement={"clusters": ["edge-2"]}))
            one, two = (
                SyncProbe(server.grpc_address, name, credentials=server.agent_credentials(name))
                for name in ("edge-1", "edge-2")
            )
            for probe in (one, two):
                await probe.register()
            await one.sync_until(lambda p: "default/everywhere" in p.names())
            await two.sync_until(lambda p: p.names() == {"default/everywhere", "default/only-two"})
    assert one.names() == {"default/everywhere"}
