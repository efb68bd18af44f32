"""Listing: ordering, filtering in Python, paging with `limit` and `after`."""

import pytest

from meshplane.store import Store
from meshplane.store import store as store_module


async def _fill(store: Store) -> None:
    for project in ("b", "a"):
        for i in range(5, 0, -1):
            await store.create("Api", project, f"api-{i}", spec={"i": i}, labels={"even": str(i % 2 == 0)})
    await store.create("Gateway", "a", "gw", spec={})
    await store.delete("Api", "a", "api-3")


def _keys(items: list) -> list[tuple[str, str]]:
    return [(obj.project, obj.name) for obj in items]


async def test_list_returns_live_objects_of_a_kind_in_project_name_order(store: Store) -> None:
    await _fill(store)

    items, revision = await store.list("Api")

    assert _keys(items) == [("a", f"api-{i}") for i in (1, 2, 4, 5)] + [("b", f"api-{i}") for i in range(1, 6)]
    assert revision == await store.current_revision() == 12


async def test_list_narrows_to_a_project(store: Store) -> None:
    await _fill(store)
    items, _ = await store.list("Api", "b")
    assert _keys(items) == [("b", f"api-{i}") for i in range(1, 6)]


async def test_list_filters_with_where_before_applying_limit(store: Store) -> None:
    await _fill(store)

    items, _ = await store.list("Api", where=lambda obj: obj.labels["even"] == "True", limit=3)

    assert _keys(items) == [("a", "api-2"), ("a", "api-4"), ("b", "api-2")]


async def test_list_pages_with_limit_and_after(store: Store) -> None:
    await _fill(store)
    everything, _ = await store.list("Api")

    pages: list[list[tuple[str, str]]] = []
    after = None
    while True:
        page, _ = await store.list("Api", limit=4, after=after)
        if not page:
            break
        pages.append(_keys(page))
        after = (page[-1].project, page[-1].name)

    assert [len(page) for page in pages] == [4, 4, 1]
    assert [key for page in pages for key in page] == _keys(everything)


async def test_list_reads_as_many_batches_as_it_needs(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_module, "_LIST_BATCH", 3)
    for i in range(1, 21):
        await store.create("Route", "p", f"r-{i:02}", spec={})

    sevens, _ = await store.list("Route", where=lambda obj: obj.name.endswith("7"), limit=2)
    tail, _ = await store.list("Route", after=("p", "r-12"))
    page, _ = await store.list("Route", limit=7, after=("p", "r-02"))

    assert [obj.name for obj in sevens] == ["r-07", "r-17"]
    assert [obj.name for obj in tail] == [f"r-{i}" for i in range(13, 21)]
    assert [obj.name for obj in page] == [f"r-{i:02}" for i in range(3, 10)]


async def test_list_limit_zero_is_empty_and_negative_is_refused(store: Store) -> None:
    await _fill(store)
    assert (await store.list("Api", limit=0))[0] == []
    with pytest.raises(ValueError, match="limit"):
        await store.list("Api", limit=-1)
