"""Per-cluster API figures: the newest sample of each cluster kept, resets counted, many reports written together."""

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from meshplane.store import Store
from meshplane.store.records import ApiFigureRecord

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def figure(cluster: str, requests: int, errors: int, at: datetime, name: str = "orders") -> ApiFigureRecord:
    by_class = {"2xx": requests - errors, "5xx": errors}
    return ApiFigureRecord(cluster, "shop", name, requests, errors, by_class, at)


async def test_figures_of_gives_each_clusters_latest_report(store: Store) -> None:
    await store.record_figures("edge-1", [figure("edge-1", 10, 1, T0), figure("edge-1", 5, 0, T0, name="users")])
    await store.record_figures("edge-2", [figure("edge-2", 7, 0, T0)])
    await store.record_figures("edge-1", [figure("edge-1", 20, 3, T0 + timedelta(seconds=5))])

    found = await store.figures_of("shop", "orders")

    assert found == {
        "edge-1": figure("edge-1", 20, 3, T0 + timedelta(seconds=5)),
        "edge-2": figure("edge-2", 7, 0, T0),
    }
    assert (await store.figures_of("shop", "orders", clusters=["edge-2"])).keys() == {"edge-2"}
    assert await store.figures_of("shop", "orders", clusters=[]) == {}
    assert await store.figures_of("shop", "nothing") == {}


async def test_an_older_sample_never_replaces_a_newer_one(store: Store) -> None:
    await store.record_figures("edge-1", [figure("edge-1", 20, 3, T0 + timedelta(seconds=5))])
    await store.record_figures("edge-1", [figure("edge-1", 10, 1, T0)])  # a retry overtaken by the later report

    assert (await store.figures_of("shop", "orders"))["edge-1"] == figure("edge-1", 20, 3, T0 + timedelta(seconds=5))


async def test_a_report_lower_than_the_last_counts_as_a_reset(store: Store) -> None:
    await store.record_figures("edge-1", [figure("edge-1", 20, 3, T0)])
    await store.record_figures("edge-1", [figure("edge-1", 4, 0, T0 + timedelta(seconds=5))])
    await store.record_figures("edge-1", [figure("edge-1", 9, 1, T0 + timedelta(seconds=10))])

    kept = (await store.figures_of("shop", "orders"))["edge-1"]

    assert (kept.requests, kept.errors, kept.resets) == (9, 1, 1)


async def test_figures_of_another_cluster_are_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="another cluster"):
        await store.record_figures("edge-1", [figure("edge-2", 1, 0, T0)])

    assert await store.figures_of("shop", "orders") == {}


async def test_many_clusters_reporting_at_once_are_all_kept(store: Store) -> None:
    clusters = [f"edge-{n}" for n in range(200)]

    await asyncio.gather(
        *(store.record_figures(c, [figure(c, 3, 1, T0), figure(c, 2, 0, T0, "users")]) for c in clusters)
    )

    assert (await store.figures_of("shop", "orders")).keys() == set(clusters)
    assert len(await store.figures_of("shop", "users")) == len(clusters)
