"""On SQLite, reading objects by key searches an index whatever the number of keys, and a group commit's fence
reads the objects written since its revision by the revision index: neither scans the table, so a write costs
the same among ten objects or ten thousand."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import event

from meshplane.store import Store, queries, sqlite_commit
from meshplane.store.engine import create_engines

KEYS = [("API", "shop", "orders"), ("Rollout", "shop", "api-orders"), ("API", "billing", "invoices")]


@pytest.fixture
async def database(tmp_path: Path) -> str:
    """A SQLite store holding a few objects; its file."""
    path = tmp_path / "meshplane.db"
    store = await Store.open(f"sqlite+aiosqlite:///{path}")
    for i in range(20):
        await store.create("API", "shop", f"api-{i}", spec={"basePath": f"/{i}"})
    await store.close()
    return str(path)


def plan(path: str, statement: str, parameters: tuple) -> list[str]:
    """SQLite's plan of a statement, one line per step."""
    with sqlite3.connect(path) as db:
        return [row[3] for row in db.execute(f"EXPLAIN QUERY PLAN {statement}", parameters)]


def searches_indexes(steps: list[str]) -> None:
    assert steps, "no statement was planned"
    assert not [step for step in steps if step.startswith("SCAN objects")], steps
    assert not [step for step in steps if "(kind=?)" in step], steps  # all rows of a kind: a scan by another name


@pytest.mark.parametrize("keys", [KEYS, KEYS[:1]], ids=["keys", "one-key"])
async def test_reads_by_key_search_the_key_index(database: str, keys: list[tuple[str, str, str]]) -> None:
    engines = create_engines(f"sqlite+aiosqlite:///{database}")
    statements: list[tuple[str, tuple]] = []

    def capture(_conn: object, _cursor: object, statement: str, parameters: tuple, *_: object) -> None:
        statements.append((statement, parameters))

    try:
        async with engines.read.connect() as conn:
            event.listen(conn.sync_connection, "before_cursor_execute", capture)
            await queries.load_many(conn, keys)
    finally:
        await engines.base.dispose()
    selects = [(s, p) for s, p in statements if s.lstrip().upper().startswith("SELECT")]
    searches_indexes([step for statement, parameters in selects for step in plan(database, statement, parameters)])


@pytest.mark.parametrize(
    ("statement", "parameters"),
    [
        (sqlite_commit._READ_NAMED, (json.dumps(KEYS),)),
        (sqlite_commit._READ_FENCED, (3, json.dumps(["API", "RolloutPolicy"]))),
    ],
    ids=["named", "fenced"],
)
def test_a_group_commits_reads_search_indexes(database: str, statement: str, parameters: tuple) -> None:
    searches_indexes(plan(database, statement, parameters))
