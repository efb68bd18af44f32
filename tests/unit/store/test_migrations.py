"""Migrations: idempotent, safe when several starters race, and in step with the schema the queries use."""

import asyncio
from datetime import UTC, datetime
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Connection, inspect

from meshplane.store import Store, migrate
from meshplane.store.engine import create_engines
from meshplane.store.schema import metadata, objects


async def test_opening_again_keeps_the_data(store: Store, store_url: str) -> None:
    await store.create("Api", "shop", "orders", spec={"v": 1})
    await store.close()

    reopened = await Store.open(store_url)
    try:
        assert (await reopened.get("Api", "shop", "orders")).spec == {"v": 1}
        assert await reopened.current_revision() == 1
    finally:
        await reopened.close()


async def test_racing_opens_of_a_new_database_all_succeed(store_url: str) -> None:
    stores = await asyncio.gather(*(Store.open(store_url) for _ in range(4)))
    try:
        await stores[0].create("Api", "shop", "orders", spec={})
        assert [await s.current_revision() for s in stores] == [1, 1, 1, 1]
    finally:
        for opened in stores:
            await opened.close()


async def test_migrated_schema_matches_the_tables_the_store_queries(store: Store, store_url: str) -> None:
    def differences(conn: Connection) -> list:
        return compare_metadata(MigrationContext.configure(conn), metadata)

    engines = create_engines(store_url)
    try:
        async with engines.base.connect() as conn:
            assert await conn.run_sync(differences) == []
    finally:
        await engines.base.dispose()


async def test_downgrade_to_base_removes_everything_and_upgrade_restores_it(store_url: str) -> None:
    engines = create_engines(store_url)
    try:
        await migrate.upgrade(engines)
        await migrate.downgrade(engines, "base")
        async with engines.base.connect() as conn:
            assert await conn.run_sync(lambda sync: inspect(sync).get_table_names()) == ["alembic_version"]
        await migrate.upgrade(engines)
        async with engines.base.connect() as conn:
            tables = await conn.run_sync(lambda sync: set(inspect(sync).get_table_names()))
        assert tables == {"alembic_version", *metadata.tables}
    finally:
        await engines.base.dispose()


async def test_open_creates_the_sqlite_directory(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dir" / "meshplane.db"
    opened = await Store.open(f"sqlite+aiosqlite:///{path}")
    await opened.close()
    assert path.exists()


async def test_objects_stored_before_history_keep_their_version_as_its_first_entry(store_url: str) -> None:
    """A rollout started by an object's first change after the upgrade keeps clusters on the version before it."""
    engines = create_engines(store_url)
    now = datetime.now(UTC)
    row = {
        "kind": "API",
        "project": "shop",
        "uid": "u",
        "revision": 1,
        "generation": 1,
        "origin": None,
        "labels": {},
        "annotations": {},
        "spec": {"v": 1},
        "status": {},
        "created_at": now,
        "updated_at": now,
    }
    try:
        await migrate.upgrade(engines, "0005")
        async with engines.write.begin() as conn:
            await conn.execute(objects.insert(), [row | {"name": "orders", "deleted": False}])
            await conn.execute(objects.insert(), [row | {"name": "gone", "deleted": True, "revision": 2}])
    finally:
        await engines.base.dispose()
    store = await Store.open(store_url)
    try:
        kept = await store.version_in_force("API", "shop", "orders", 5)
        assert kept is not None and kept.spec == {"v": 1}
        assert await store.history("API", "shop", "gone") == []
    finally:
        await store.close()
