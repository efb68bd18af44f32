"""The trace context of the write that made each object what it is, read back from the event log."""

from __future__ import annotations

from meshplane.store import Store


def trace(n: int) -> dict[str, str]:
    return {"traceparent": f"00-{n:032x}-{n:016x}-01"}


async def test_each_objects_latest_change_names_its_trace(store: Store) -> None:
    await store.create("Api", "shop", "orders", spec={"v": 1}, trace_context=trace(1))
    await store.set_status("Api", "shop", "orders", {"ready": True})
    await store.create("Api", "shop", "billing", spec={"v": 1}, trace_context=trace(2))
    snapshot = await store.current_revision()
    await store.put("Api", "shop", "billing", spec={"v": 2})
    await store.create("Api", "shop", "untraced", spec={"v": 1})
    await store.create("Cluster", "", "edge-1", spec={}, trace_context=trace(3))

    assert await store.latest_trace_contexts(["Api"], snapshot) == {
        ("Api", "shop", "orders"): trace(1),
        ("Api", "shop", "billing"): trace(2),
    }
    # Later, billing changed without a trace: its pushes no longer belong to the first write's trace.
    assert await store.latest_trace_contexts(["Api"], await store.current_revision()) == {
        ("Api", "shop", "orders"): trace(1)
    }


async def test_compacted_changes_are_forgotten(store: Store) -> None:
    await store.create("Api", "shop", "orders", spec={"v": 1}, trace_context=trace(1))
    await store.compact(await store.current_revision())
    assert await store.latest_trace_contexts(["Api"], await store.current_revision()) == {}
