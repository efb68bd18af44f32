"""Persistence for meshplane objects: SQLite embedded, PostgreSQL in production, one gap-free event log."""

from meshplane.model.stored import StoredObject
from meshplane.store.errors import AlreadyExists, Compacted, Conflict, NotFound, StoreError
from meshplane.store.records import Event
from meshplane.store.store import Store

__all__ = ["AlreadyExists", "Compacted", "Conflict", "Event", "NotFound", "Store", "StoreError", "StoredObject"]
