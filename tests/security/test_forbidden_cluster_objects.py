"""Objects a cluster could publish before a cluster was allowed only its own kinds (a KeySet, a Subscription,
a Project, ...) are deleted when the store is upgraded, each with its event, so no replica serves them and
every agent is told they are gone; what a cluster may make (APIs, its ServiceEndpoints) stays."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import insert, select, update

from meshplane.store import Store, migrate
from meshplane.store.engine import create_engines
from meshplane.store.errors import NotFound
from meshplane.store.schema import events, meta, objects


def _row(kind: str, project: str, name: str, revision: int, origin: str | None) -> dict:
    now = datetime.now(UTC)
    return {
        "kind": kind,
        "project": project,
        "name": name,
        "uid": f"uid-{revision}",
        "revision": revision,
        "generation": 1,
        "origin": origin,
        "labels": {},
        "annotations": {},
        "spec": {},
        "status": {},
        "created_at": now,
        "updated_at": now,
        "deleted": False,
    }


async def test_upgrading_deletes_what_a_cluster_may_not_have_made(store_url: str) -> None:
    engines = create_engines(store_url)
    try:
        await migrate.upgrade(engines, "0004")
        stored = [
            ("KeySet", "", "api-keys", "cluster/a"),
            ("Subscription", "shop", "mobile-orders", "cluster/a"),
            ("Project", "", "rogue", "cluster/a"),
            ("API", "shop", "local", "cluster/a"),
            ("ServiceEndpoint", "shop", "orders-a", "cluster/a"),
            ("KeySet", "", "fleet", None),
        ]
        async with engines.write.begin() as conn:
            for revision, (kind, project, name, origin) in enumerate(stored, start=1):
                await conn.execute(insert(objects).values(_row(kind, project, name, revision, origin)))
            await conn.execute(update(meta).where(meta.c.id == 1).values(revision=len(stored)))
        await migrate.upgrade(engines)
        async with engines.base.connect() as conn:
            deleted = (await conn.execute(select(events.c.kind, events.c.name, events.c.op, events.c.revision))).all()
    finally:
        await engines.base.dispose()

    assert sorted((kind, name, op) for kind, name, op, _ in deleted) == [
        ("KeySet", "api-keys", "delete"),
        ("Project", "rogue", "delete"),
        ("Subscription", "mobile-orders", "delete"),
    ]
    assert sorted(revision for *_, revision in deleted) == [7, 8, 9]
    store = await Store.open(store_url)
    try:
        assert await store.current_revision() == 9
        for kind, project, name in (("KeySet", "", "api-keys"), ("Project", "", "rogue")):
            with pytest.raises(NotFound):
                await store.get(kind, project, name)
        assert (await store.get("API", "shop", "local")).origin == "cluster/a"
        assert (await store.get("ServiceEndpoint", "shop", "orders-a")).origin == "cluster/a"
        assert (await store.get("KeySet", "", "fleet")).origin is None
    finally:
        await store.close()
