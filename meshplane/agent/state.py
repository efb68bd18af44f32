"""The agent's local state: every delivered resource with its version, in SQLite under --state-dir.

It survives restarts, so an agent serves its gateways from it before the control plane answers
(static stability), and tells the server on reconnect what it already holds.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
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
CREATE TABLE IF NOT EXISTS rejected (
    type_url TEXT NOT NULL,
    name TEXT NOT NULL,
    version TEXT NOT NULL,
    PRIMARY KEY (type_url, name)
);
CREATE TABLE IF NOT EXISTS reports (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    body BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""


@dataclass(frozen=True, slots=True)
class HeldResource:
    name: str
    version: str
    body: bytes
    """The serialized message (not the Any): what the server delivered, byte for byte."""


class LocalState:
    """Reads come from memory; every change is committed to disk before it is acknowledged.

    Besides the resources it keeps the versions the gateways rejected (never served again) and the
    reports not yet accepted by the server, in the order they were made.
    """

    def __init__(
        self,
        db: aiosqlite.Connection,
        held: dict[str, dict[str, HeldResource]],
        rejected: dict[tuple[str, str], str],
        instance: str,
        refused: dict[str, str] | None = None,
        reported_routes: frozenset[tuple[str, str, str]] = frozenset(),
    ):
        self._db = db
        self._held = held
        self.rejected = rejected
        self.instance = instance
        """A random id of this state, so report keys never repeat even after the state is wiped."""
        self.refused: dict[str, str] = refused or {}
        """APIs the agent last refused to serve, with the reasons; kept across restarts, so a refusal that a
        restart with other settings ends (or begins) is reported."""
        self.reported_routes = reported_routes
        """The cluster's Gateway API routes (kind, namespace, name) reported up, so that one deleted while the
        agent was down is reported deleted when it is back."""

    @classmethod
    async def open(cls, state_dir: Path) -> LocalState:
        await asyncio.to_thread(_private_file, state_dir / "state.db")
        db = await aiosqlite.connect(state_dir / "state.db")
        await db.execute("PRAGMA journal_mode=WAL")
        await db.execute("PRAGMA synchronous=NORMAL")
        await db.executescript(_SCHEMA)
        held: dict[str, dict[str, HeldResource]] = {}
        async with db.execute("SELECT type_url, name, version, body FROM resources") as rows:
            async for type_url, name, version, body in rows:
                held.setdefault(type_url, {})[name] = HeldResource(name, version, bytes(body))
        async with db.execute("SELECT type_url, name, version FROM rejected") as rows:
            rejected = {(type_url, name): version async for type_url, name, version in rows}
        await db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('instance', ?)", (uuid.uuid4().hex,))
        await db.commit()
        async with db.execute("SELECT value FROM meta WHERE key = 'instance'") as rows:
            (instance,) = await rows.fetchone()  # type: ignore[misc]
        async with db.execute("SELECT value FROM meta WHERE key = 'refused'") as rows:
            row = await rows.fetchone()
        refused = json.loads(row[0]) if row else {}
        async with db.execute("SELECT value FROM meta WHERE key = 'reported_routes'") as rows:
            row = await rows.fetchone()
        routes = (
            frozenset((kind, namespace, name) for kind, namespace, name in json.loads(row[0])) if row else frozenset()
        )
        return cls(db, held, rejected, instance, refused, routes)

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
        # Each statement is a trip to the database's thread: none is made for nothing.
        if upserts:
            await self._db.executemany(
                "INSERT OR REPLACE INTO resources (type_url, name, version, body) VALUES (?, ?, ?, ?)",
                [(type_url, r.name, r.version, r.body) for r in upserts],
            )
        if removals:
            await self._db.executemany(
                "DELETE FROM resources WHERE type_url = ? AND name = ?", [(type_url, name) for name in removals]
            )
        await self._db.commit()
        held = self._held.setdefault(type_url, {})
        for r in upserts:
            held[r.name] = r
        for name in removals:
            held.pop(name, None)

    async def reject(self, type_url: str, name: str, version: str) -> None:
        """Remember that the gateways refused this version, so it is not served again."""
        await self._db.execute(
            "INSERT OR REPLACE INTO rejected (type_url, name, version) VALUES (?, ?, ?)", (type_url, name, version)
        )
        await self._db.commit()
        self.rejected[(type_url, name)] = version

    async def keep_refused(self, refused: Mapping[str, str]) -> None:
        """Remember which APIs are refused now (a write only when that changed)."""
        if dict(refused) == self.refused:
            return
        await self._db.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('refused', ?)", (json.dumps(dict(refused)),)
        )
        await self._db.commit()
        self.refused = dict(refused)

    async def keep_reported_routes(self, routes: frozenset[tuple[str, str, str]]) -> None:
        """Remember which routes are reported up now (a write only when that changed)."""
        if routes == self.reported_routes:
            return
        await self._db.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('reported_routes', ?)", (json.dumps(sorted(routes)),)
        )
        await self._db.commit()
        self.reported_routes = routes

    async def enqueue_report(self, body: bytes) -> int:
        """Keep a report until the server has taken it; its sequence number makes its idempotency key."""
        cursor = await self._db.execute("INSERT INTO reports (body) VALUES (?)", (body,))
        await self._db.commit()
        return int(cursor.lastrowid or 0)

    async def pending_reports(self, limit: int = 50) -> list[tuple[int, bytes]]:
        async with self._db.execute("SELECT seq, body FROM reports ORDER BY seq LIMIT ?", (limit,)) as rows:
            return [(int(seq), bytes(body)) async for seq, body in rows]

    async def drop_report(self, seq: int) -> None:
        await self._db.execute("DELETE FROM reports WHERE seq = ?", (seq,))
        await self._db.commit()


def _private_file(path: Path) -> None:
    """The state holds delivered private keys: its directory and file are the agent user's alone (SQLite
    gives its journal files the database file's mode)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    for file in (path, path.with_name(f"{path.name}-wal"), path.with_name(f"{path.name}-shm")):
        if file.exists():
            file.chmod(0o600)
