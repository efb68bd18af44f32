"""Per-cluster request figures of each API, as the clusters' agents read them from their gateways.

Revision ID: 0007
Revises: 0006 (history and audit)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_key = sa.String().with_variant(sa.String(collation="C"), "postgresql")


def upgrade() -> None:
    op.create_table(
        "api_figures",
        sa.Column("cluster", _key, nullable=False),
        sa.Column("project", _key, nullable=False),
        sa.Column("name", _key, nullable=False),
        sa.Column("requests", sa.BigInteger, nullable=False),
        sa.Column("errors", sa.BigInteger, nullable=False),
        sa.Column("by_class", sa.JSON().with_variant(JSONB(), "postgresql"), nullable=False),
        sa.Column("resets", sa.Integer, nullable=False),
        sa.Column("sampled_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("cluster", "project", "name", name="pk_api_figures"),
    )
    op.create_index("ix_api_figures_api", "api_figures", ["project", "name"])


def downgrade() -> None:
    op.drop_index("ix_api_figures_api", table_name="api_figures")
    op.drop_table("api_figures")
