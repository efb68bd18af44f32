"""On PostgreSQL a group commits in two statements unless another writer commits between them: then it takes
the writer slot, and is read and decided again under it. Nothing is lost or reordered either way."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from meshplane.store import Store, pg_commit
from meshplane.store.store import _UNLOCKED_ATTEMPTS as UNLOCKED_ATTEMPTS

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
        found = await read(*args)
        seen.append(found[0])
        if len(seen) <= races:
            await meanwhile(len(seen))
        return found

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

    assert seen[0] == 1  # read before their write at revision 2, and decided again after it
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

    assert len(seen) == UNLOCKED_ATTEMPTS  # lost races, then the locked transaction, which reads another way
    assert created.revision == UNLOCKED_ATTEMPTS + 1
    events, _ = await mine.changes_since(0)
    assert [e.name for e in events] == [f"theirs-{n}" for n in range(1, UNLOCKED_ATTEMPTS + 1)] + ["mine"]
