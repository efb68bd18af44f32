"""The tables as the store's queries see them; migrations/ creates them and tests check the two agree."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Dialect,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    TypeDecorator,
)
from sqlalchemy.dialects.postgresql import JSONB


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC in and out: SQLite keeps no offset, so one is put back on read."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("naive datetimes are ambiguous; pass an aware one")
        return value.astimezone(UTC) if value is not None else None

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


Key = String().with_variant(String(collation="C"), "postgresql")
Json = JSON().with_variant(JSONB(), "postgresql")
Revision = BigInteger().with_variant(Integer(), "sqlite")

metadata = MetaData()

meta = Table(
    "meta",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("revision", Revision, nullable=False),
    Column("compacted_revision", Revision, nullable=False),
    CheckConstraint("id = 1", name="ck_meta_single_row"),
)

objects = Table(
    "objects",
    metadata,
    Column("kind", Key, nullable=False),
    Column("project", Key, nullable=False),
    Column("name", Key, nullable=False),
    Column("uid", String, nullable=False),
    Column("revision", Revision, nullable=False),
    Column("generation", BigInteger, nullable=False),
    Column("origin", String, nullable=True),
    Column("labels", Json, nullable=False),
    Column("annotations", Json, nullable=False),
    Column("spec", Json, nullable=False),
    Column("status", Json, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("deleted", Boolean, nullable=False),
    PrimaryKeyConstraint("kind", "project", "name", name="pk_objects"),
    Index("ix_objects_revision", "revision"),
)

events = Table(
    "events",
    metadata,
    Column("revision", Revision, primary_key=True, autoincrement=False),
    Column("op", String, nullable=False),
    Column("kind", Key, nullable=False),
    Column("project", Key, nullable=False),
    Column("name", Key, nullable=False),
    Column("trace_context", Json, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    CheckConstraint("op IN ('create', 'update', 'delete', 'status')", name="ck_events_op"),
)

deliveries = Table(
    "deliveries",
    metadata,
    Column("cluster", Key, nullable=False),
    Column("kind", Key, nullable=False),
    Column("project", Key, nullable=False),
    Column("name", Key, nullable=False),
    Column("version", String, nullable=False),
    Column("state", String, nullable=False),
    Column("message", String, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    PrimaryKeyConstraint("cluster", "kind", "project", "name", name="pk_deliveries"),
    Index("ix_deliveries_updated_at", "updated_at"),
    CheckConstraint("state IN ('Pending', 'Applied', 'Failed')", name="ck_deliveries_state"),
)

idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    Column("key", String, primary_key=True),
    Column("created_at", UTCDateTime, nullable=False),
    Index("ix_idempotency_keys_created_at", "created_at"),
)

tokens = Table(
    "tokens",
    metadata,
    Column("id", Key, primary_key=True),
    Column("name", String, nullable=False),
    Column("role", String, nullable=False),
    Column("project", Key, nullable=True),
    Column("digest", String, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=True),
    Column("revoked", Boolean, nullable=False),
    CheckConstraint("role IN ('admin', 'publisher', 'subscriber', 'viewer')", name="ck_tokens_role"),
)

api_figures = Table(
    "api_figures",
    metadata,
    Column("cluster", Key, nullable=False),
    Column("project", Key, nullable=False),
    Column("name", Key, nullable=False),
    Column("requests", BigInteger, nullable=False),
    Column("errors", BigInteger, nullable=False),
    Column("by_class", Json, nullable=False),
    Column("resets", Integer, nullable=False),
    Column("sampled_at", UTCDateTime, nullable=False),
    Column("received_at", UTCDateTime, nullable=False),
    PrimaryKeyConstraint("cluster", "project", "name", name="pk_api_figures"),
    Index("ix_api_figures_api", "project", "name"),
)

server_keys = Table(
    "server_keys",
    metadata,
    Column("name", Key, primary_key=True),
    Column("key", LargeBinary, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
)

history = Table(
    "history",
    metadata,
    Column("kind", Key, nullable=False),
    Column("project", Key, nullable=False),
    Column("name", Key, nullable=False),
    Column("revision", Revision, nullable=False),
    Column("op", String, nullable=False),
    Column("uid", String, nullable=False),
    Column("generation", BigInteger, nullable=False),
    Column("origin", String, nullable=True),
    Column("labels", Json, nullable=False),
    Column("annotations", Json, nullable=False),
    Column("spec", Json, nullable=False),
    Column("deleted", Boolean, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("at", UTCDateTime, nullable=False),
    Column("who", String, nullable=False),
    PrimaryKeyConstraint("kind", "project", "name", "revision", name="pk_history"),
    CheckConstraint("op IN ('create', 'update', 'delete')", name="ck_history_op"),
)

audit = Table(
    "audit",
    metadata,
    Column("revision", Revision, primary_key=True, autoincrement=False),
    Column("at", UTCDateTime, nullable=False),
    Column("who", String, nullable=False),
    Column("address", String, nullable=True),
    Column("request_id", String, nullable=True),
    Column("trace_id", String, nullable=True),
    Column("kind", Key, nullable=False),
    Column("project", Key, nullable=False),
    Column("name", Key, nullable=False),
    Column("operation", String, nullable=False),
    Column("generation", BigInteger, nullable=False),
    Index("ix_audit_at", "at"),
    CheckConstraint("operation IN ('create', 'update', 'delete')", name="ck_audit_operation"),
)
