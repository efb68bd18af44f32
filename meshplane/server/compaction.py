"""Compaction: the event log and old idempotency keys are kept for a retention window, then dropped; so are
object versions beyond the newest `history_keep` of each object, and audit entries older than `audit_keep_days`.

A consumer behind the window (a replica that was down, a watch with an old `since`) is told so by the
store (Compacted) and resyncs from a snapshot: never a silent gap.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from meshplane.observability.logging import get_logger
from meshplane.server.leader import Leadership
from meshplane.store.store import Store

log = get_logger("meshplane.server.compaction")


class Compactor:
    def __init__(
        self,
        store: Store,
        leadership: Leadership,
        retention: float,
        interval: float,
        history_keep: int = 100,
        audit_keep_days: float = 90.0,
    ):
        self.store = store
        self.leadership = leadership
        self.retention = timedelta(seconds=retention)
        self.interval = interval
        self.history_keep = history_keep
        self.audit_retention = timedelta(days=audit_keep_days)

    async def compact_once(self) -> int:
        now = datetime.now(UTC)
        cutoff = now - self.retention
        removed = await self.store.forget_idempotency_keys(cutoff)
        removed += await self.store.prune_history(self.history_keep, now - self.audit_retention)
        revision = await self.store.last_revision_before(cutoff)
        if revision is not None:
            removed += await self.store.compact(revision)
        if removed:
            log.info("compacted", up_to_revision=revision, rows=removed)
        return removed

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            if not self.leadership.is_leader:
                continue
            try:
                await self.compact_once()
            except Exception:
                log.exception("compaction failed; will retry")
