"""On PostgreSQL a group commits in two statements unless another writer commits between them: then the group
is read and decided again, and after a few lost races it takes the writer slot. Nothing is lost or reordered
either way."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from meshplane.store import Store, pg_commit

pytestmark = pytest.mark.postgres


@pytest.fixture
async def stores(postgres_url: str) -> Any:
    """Two stores on one database: this replica's and another's."""
    mine, theirs = await Store.open(postgres_url), await Store.open(postgres_url)
    yield mine, theirs
    await mine.close()
    await theirs.close()


def racing(monkeypatch: pytest.MonkeyPatch, races: int, meanwhile: Callable[[int], Awaitable[None]]) -> list[int]:
    """Make the next `races` reads of a group commit be followed by `meanwhile(n)`: another writer's commit
    between the read and the write. Returns the revisions the reads saw."""
    read = pg_commit.read
    seen: list[int] = []

    async def read_then_race(*args: Any) -> Any:
        revision, rows = await read(*args)
        seen.append(revision)
        if len(seen) <= races:
            await meanwhile(len(seen))
        return revision, rows

    monkeypatch.setattr(pg_commit, "read", read_then_race)
    return seen


async def test_a_group_overtaken_between_its_statements_is_decided_again(
    stores: tuple[Store, Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    mine, theirs = stores
    await mine.create("API", "shop", "orders", spec={"v": 1})
    read = pg_commit.read

    async def theirs_first(_: int) -> None:
        with monkeypatch.context() as undone:  # their store reads unraced
            undone.setattr(pg_commit, "read", read)
            await theirs.put("API", "shop", "orders", spec={"v": 2})

    seen = racing(monkeypatch, 1, theirs_first)
    updated, _ = await mine.put("API", "shop", "orders", spec={"v": 3})

    assert seen == [1, 2]  # read again after their write at revision 2
    assert updated.revision == 3 and updated.generation == 3  # decided on their version, not the first read
    events, _ = await mine.changes_since(0)
    assert [(e.revision, e.op) for e in events] == [(1, "create"), (2, "update"), (3, "update")]
    assert [h.revision for h in await mine.history("API", "shop", "orders")] == [3, 2, 1]


async def test_a_group_that_keeps_losing_the_race_takes_the_writer_slot(
    stores: tuple[Store, Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    mine, theirs = stores
    read = pg_commit.read

    async def theirs_first(n: int) -> None:
        with monkeypatch.context() as undone:
            undone.setattr(pg_commit, "read", read)
            await theirs.create("API", "shop", f"theirs-{n}", spec={})

    seen = racing(monkeypatch, 100, theirs_first)
    created = await mine.create("API", "shop", "mine", spec={})

    assert len(seen) == 3  # three lost races, then the locked transaction, which reads no other way
    assert created.revision == 4
    events, _ = await mine.changes_since(0)
    assert [e.name for e in events] == ["theirs-1", "theirs-2", "theirs-3", "mine"]
