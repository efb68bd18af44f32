"""Alembic environment: runs on the connection `meshplane.store.migrate` hands over.

The store's engines are async, so `migrate` opens the transaction (taking the lock that keeps concurrent
starters apart) and runs Alembic through `run_sync`; this script only binds that connection.
"""

from __future__ import annotations

from alembic import context

from meshplane.store.schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata)
with context.begin_transaction():
    context.run_migrations()
