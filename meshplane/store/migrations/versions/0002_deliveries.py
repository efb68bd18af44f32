"""Per-cluster delivery state of objects, and the idempotency keys of agents' reports.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_key = sa.String().with_variant(sa.String(collation="C"), "postgresql")


def upgrade() -> None:
    op.create_table(
        "deliveries",
        sa.Column("cluster", _key, nullable=False),
        sa.Column("kind", _key, nullable=False),
        sa.Column("project", _key, nullable=False),
        sa.Column("name", _key, nullable=False),
        sa.Column("version", sa.String, nullable=False),
        sa.Column("state", sa.String, nullable=False),
        sa.Column("message", sa.String, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("cluster", "kind", "project", "name", name="pk_deliveries"),
        sa.CheckConstraint("state IN ('Pending', 'Applied', 'Failed')", name="ck_deliveries_state"),
    )
    op.create_index("ix_deliveries_updated_at", "deliveries", ["updated_at"])
    op.create_table(
        "idempotency_keys",
        sa.Column("key", sa.String, primary_key=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_idempotency_keys_created_at", "idempotency_keys", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_idempotency_keys_created_at", table_name="idempotency_keys")
    op.drop_table("idempotency_keys")
    op.drop_index("ix_deliveries_updated_at", table_name="deliveries")
    op.drop_table("deliveries")
