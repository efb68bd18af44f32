"""Move a database between schema revisions, safely when several processes start at once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, text

from meshplane.store.engine import Engines

_SCRIPTS = Path(__file__).parent / "migrations"
# The pg_advisory_xact_lock key: a constant nothing else uses ("meshplan" in ASCII).
_LOCK_KEY = 0x6D657368706C616E


async def upgrade(engines: Engines, target: str = "head") -> None:
    await _migrate(engines, command.upgrade, target)


async def downgrade(engines: Engines, target: str) -> None:
    await _migrate(engines, command.downgrade, target)


async def _migrate(engines: Engines, step: Callable[[Config, str], None], target: str) -> None:
    """Run Alembic in one write transaction; on PostgreSQL under an advisory lock held until commit.

    The lock makes a second starter wait, then find the schema current and do nothing. On SQLite the write
    transaction's BEGIN IMMEDIATE does the same job.
    """
    async with engines.write.begin() as conn:
        if engines.dialect == "postgresql":
            await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
        await conn.run_sync(_run, step, target)


def _run(conn: Connection, step: Callable[[Config, str], None], target: str) -> None:
    config = Config()
    config.set_main_option("script_location", str(_SCRIPTS))
    config.attributes["connection"] = conn
    step(config, target)
