"""The server's own gauges and histograms: connected agents and store transactions."""

from __future__ import annotations

import pytest
from envoy.config.core.v3.base_pb2 import Node

from meshplane.server.control_plane import ClusterRegistry
from meshplane.server.main import ClusterPresence
from meshplane.store.errors import NotFound
from meshplane.store.store import Store

from .support import sample


async def test_connected_agents_counts_clusters_not_streams(store: Store) -> None:
    presence = ClusterPresence(ClusterRegistry(store), lambda: None)
    node = Node(id="agent")

    await presence.on_stream_open(node, "edge-1", True)
    await presence.on_stream_open(node, "edge-1", True)  # a reconnect overlapping the old stream
    await presence.on_stream_open(node, "edge-2", True)
    assert sample("meshplane_connected_agents") == 2

    await presence.on_stream_close(node, "edge-1")
    assert sample("meshplane_connected_agents") == 2
    await presence.on_stream_close(node, "edge-1")
    assert sample("meshplane_connected_agents") == 1
    await presence.on_stream_close(node, "edge-2")
    assert sample("meshplane_connected_agents") == 0
    await presence.clusters.flush()


def transactions(operation: str) -> float:
    return sample("meshplane_store_transaction_duration_seconds_count", operation=operation)


async def test_every_store_operation_is_timed_under_its_name_failed_ones_too(store: Store) -> None:
    before = {op: transactions(op) for op in ("create", "put", "get", "list", "merge_status")}

    await store.create("API", "shop", "orders", spec={})
    await store.put("API", "shop", "orders", spec={"v": 2})
    await store.get("API", "shop", "orders")
    with pytest.raises(NotFound):
        await store.get("API", "shop", "missing")
    await store.list("API")
    await store.merge_status("API", "shop", "orders", {"ready": True})

    after = {op: transactions(op) - count for op, count in before.items()}
    assert after == {"create": 1, "put": 1, "get": 2, "list": 1, "merge_status": 1}
    assert sample("meshplane_store_transaction_duration_seconds_sum", operation="put") > 0
