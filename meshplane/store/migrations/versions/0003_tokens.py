"""Bearer tokens of the north API: who they speak for, and a digest of each (never the token).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_key = sa.String().with_variant(sa.String(collation="C"), "postgresql")


def upgrade() -> None:
    op.create_table(
        "tokens",
        sa.Column("id", _key, primary_key=True),
        sa.Column("name", sa.String, nullable=False),
        sa.Column("role", sa.String, nullable=False),
        sa.Column("project", _key, nullable=True),
        sa.Column("digest", sa.String, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked", sa.Boolean, nullable=False),
        sa.CheckConstraint("role IN ('admin', 'publisher', 'subscriber', 'viewer')", name="ck_tokens_role"),
    )


def downgrade() -> None:
    op.drop_table("tokens")
