"""On SQLite, reading objects by key searches an index whatever the number of keys, and a
write's fence reads the objects written since its revision by the revision index: neither scans the table, so a
write costs the same among ten objects or ten thousand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncConnection

from meshplane.store import Store, queries
from meshplane.store.engine import create_engines

KEYS = [("API", "shop", "orders"), ("Rollout", "shop", "api-orders"), ("API", "billing", "invoices")]


async def plans(conn: AsyncConnection, statements: list[tuple[str, Any]]) -> list[str]:
    """SQLite's plan of each statement run, one line per step."""
    steps = []
    for statement, parameters in statements:
        found = await conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)
        steps.extend(row[3] for row in found)
    return steps


@pytest.mark.parametrize(
    "read",
    [
        lambda conn: queries.load_many(conn, KEYS),
        lambda conn: queries.load_many(conn, KEYS[:1], (3, ["API", "RolloutPolicy"])),
        lambda conn: queries.load_many(conn, KEYS, (3, ["API"])),
    ],
    ids=["keys", "one-key-and-fence", "keys-and-fence"],
)
async def test_reads_by_key_and_fence_search_indexes(tmp_path: Path, read: Any) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'meshplane.db'}"
    store = await Store.open(url)
    for i in range(20):
        await store.create("API", "shop", f"api-{i}", spec={"basePath": f"/{i}"})
    await store.close()
    engines = create_engines(url)
    statements: list[tuple[str, Any]] = []

    def capture(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool) -> None:
        statements.append((statement, parameters))

    try:
        async with engines.read.connect() as conn:
            event.listen(conn.sync_connection, "before_cursor_execute", capture)
            await read(conn)
            event.remove(conn.sync_connection, "before_cursor_execute", capture)
            steps = await plans(conn, [s for s in statements if s[0].lstrip().upper().startswith("SELECT")])
    finally:
        await engines.base.dispose()
    assert steps, "no statement was run"
    assert not [step for step in steps if step.startswith("SCAN objects")], steps
    assert not [step for step in steps if "(kind=?)" in step], steps  # all rows of a kind: a scan by another name
