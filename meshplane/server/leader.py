"""Leadership for background work (compaction, status roll-up): one server replica at a time.

On PostgreSQL the leader holds a session advisory lock on a connection of its own; when that replica
dies its connection closes, the lock is released, and another replica takes over within one retry
interval. A single SQLite server is always the leader.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import asyncpg

from meshplane.lifecycle import wait_at_most
from meshplane.observability.logging import get_logger
from meshplane.observability.metrics import LEADER
from meshplane.store.store import Store

log = get_logger("meshplane.server.leader")

# "meshlead" in ASCII: a key nothing else locks.
LEADER_LOCK = 0x6D6573686C656164


class Leadership:
    def __init__(self, store: Store, retry_interval: float = 2.0):
        self.store = store
        self.retry_interval = retry_interval
        self.is_leader = store.dialect != "postgresql"

    @property
    def is_leader(self) -> bool:
        return self._leading

    @is_leader.setter
    def is_leader(self, leading: bool) -> None:
        self._leading = leading
        LEADER.set(leading)

    async def run(self) -> None:
        if self.store.dialect != "postgresql":
            return
        while True:
            conn: asyncpg.Connection | None = None
            try:
                conn = await asyncpg.connect(self.store.driver_dsn)
                while True:
                    if await conn.fetchval("SELECT pg_try_advisory_lock($1)", LEADER_LOCK):
                        break
                    await asyncio.sleep(self.retry_interval)
                self.is_leader = True
                log.info("this replica leads background work")
                while True:
                    await asyncio.sleep(self.retry_interval)
                    await conn.fetchval("SELECT 1")
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                if self.is_leader:
                    log.warning("lost leadership", error=str(exc))
                self.is_leader = False
                await asyncio.sleep(self.retry_interval)
            finally:
                self.is_leader = False
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close()

    async def passes(
        self,
        work: Callable[[], Awaitable[None]],
        wake: asyncio.Event,
        interval: float,
        what: str,
        meanwhile: Callable[[], None] | None = None,
    ) -> None:
        """Run `work` while this replica leads: every `interval` seconds, and at once when `wake` is set; on a
        replica that does not lead, `meanwhile` instead. A pass that fails is logged and the next one tries again."""
        while True:
            try:
                if self.is_leader:
                    await work()
                elif meanwhile is not None:
                    meanwhile()
            except Exception:
                log.exception(f"{what} failed; retrying")
            wake.clear()
            await wait_at_most(interval, wake.wait())
