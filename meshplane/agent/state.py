"""The agent's local state: every delivered resource with its version, in SQLite under --state-dir.

It survives restarts, so an agent serves its gateways from it before the control plane answers
(static stability), and tells the server on reconnect what it already holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import aiosqlite

_SCHEMA = """
CREATE TABLE IF NOT EXISTS resources (
    type_url TEXT NOT NULL,
    name TEXT NOT NULL,
    version TEXT NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (type_url, name)
);
"""


@dataclass(frozen=True, slots=True)
class HeldResource:
    name: str
    version: str
    body: bytes
    """The serialized message (not the Any): what the server delivered, byte for byte."""


class LocalState:
    """Reads come from memory; every change is committed to disk before it is acknowledged."""

    def __init__(self, db: aiosqlite.Connection, held: dict[str, dict[str, HeldResource]]):
        self._db = db
        self._held = held

    @classmethod
    async def open(cls, state_dir: Path) -> LocalState:
        await asyncio.to_thread(state_dir.mkdir, parents=True, exist_ok=True)
        db = await aiosqlite.connect(state_dir / "state.db")
        await db.execute("PRAGMA journal_mode=WAL")
        await db.execute("PRAGMA synchronous=NORMAL")
        await db.executescript(_SCHEMA)
        held: dict[str, dict[str, HeldResource]] = {}
        async with db.execute("SELECT type_url, name, version, body FROM resources") as rows:
            async for type_url, name, version, body in rows:
                held.setdefault(type_url, {})[name] = HeldResource(name, version, bytes(body))
        return cls(db, held)

    async def close(self) -> None:
        await self._db.close()

    def versions(self, type_url: str) -> dict[str, str]:
        return {name: r.version for name, r in self._held.get(type_url, {}).items()}

    def resources(self, type_url: str) -> Mapping[str, HeldResource]:
        return self._held.get(type_url, {})

    async def apply(self, type_url: str, upserts: Iterable[HeldResource], removals: Iterable[str]) -> None:
        """Commit one delta atomically, then make it visible in memory."""
        upserts = list(upserts)
        removals = list(removals)
        await self._db.executemany(
            "INSERT OR REPLACE INTO resources (type_url, name, version, body) VALUES (?, ?, ?, ?)",
            [(type_url, r.name, r.version, r.body) for r in upserts],
        )
        await self._db.executemany(
            "DELETE FROM resources WHERE type_url = ? AND name = ?", [(type_url, name) for name in removals]
        )
        await self._db.commit()
        held = self._held.setdefault(type_url, {})
        for r in upserts:
            held[r.name] = r
        for name in removals:
            held.pop(name, None)
