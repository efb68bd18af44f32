"""Initial schema: the revision counter, the objects and the event log.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_key = sa.String().with_variant(sa.String(collation="C"), "postgresql")
_json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
_revision = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    meta = op.create_table(
        "meta",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("revision", _revision, nullable=False),
        sa.Column("compacted_revision", _revision, nullable=False),
        sa.CheckConstraint("id = 1", name="ck_meta_single_row"),
    )
    op.bulk_insert(meta, [{"id": 1, "revision": 0, "compacted_revision": 0}])
    op.create_table(
        "objects",
        sa.Column("kind", _key, nullable=False),
        sa.Column("project", _key, nullable=False),
        sa.Column("name", _key, nullable=False),
        sa.Column("uid", sa.String, nullable=False),
        sa.Column("revision", _revision, nullable=False),
        sa.Column("generation", sa.BigInteger, nullable=False),
        sa.Column("origin", sa.String, nullable=True),
        sa.Column("labels", _json, nullable=False),
        sa.Column("annotations", _json, nullable=False),
        sa.Column("spec", _json, nullable=False),
        sa.Column("status", _json, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deleted", sa.Boolean, nullable=False),
        sa.PrimaryKeyConstraint("kind", "project", "name", name="pk_objects"),
    )
    op.create_index("ix_objects_revision", "objects", ["revision"])
    op.create_table(
        "events",
        sa.Column("revision", _revision, primary_key=True, autoincrement=False),
        sa.Column("op", sa.String, nullable=False),
        sa.Column("kind", _key, nullable=False),
        sa.Column("project", _key, nullable=False),
        sa.Column("name", _key, nullable=False),
        sa.Column("trace_context", _json, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("op IN ('create', 'update', 'delete', 'status')", name="ck_events_op"),
    )


def downgrade() -> None:
    op.drop_table("events")
    op.drop_index("ix_objects_revision", table_name="objects")
    op.drop_table("objects")
    op.drop_table("meta")
