"""History and audit trail: every version an object's writes made, and who made each write, from where.

Both are written in the transaction of the change they record, so neither can disagree with the objects.
Every live object's current version is kept as its first history entry (written by `system`): a rollout
started by the object's next change keeps clusters on it.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_key = sa.String().with_variant(sa.String(collation="C"), "postgresql")
_json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
_revision = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "history",
        sa.Column("kind", _key, nullable=False),
        sa.Column("project", _key, nullable=False),
        sa.Column("name", _key, nullable=False),
        sa.Column("revision", _revision, nullable=False),
        sa.Column("op", sa.String, nullable=False),
        sa.Column("uid", sa.String, nullable=False),
        sa.Column("generation", sa.BigInteger, nullable=False),
        sa.Column("origin", sa.String, nullable=True),
        sa.Column("labels", _json, nullable=False),
        sa.Column("annotations", _json, nullable=False),
        sa.Column("spec", _json, nullable=False),
        sa.Column("deleted", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("who", sa.String, nullable=False),
        sa.PrimaryKeyConstraint("kind", "project", "name", "revision", name="pk_history"),
        sa.CheckConstraint("op IN ('create', 'update', 'delete')", name="ck_history_op"),
    )
    op.execute(
        "INSERT INTO history (kind, project, name, revision, op, uid, generation, origin, labels, annotations,"
        " spec, deleted, created_at, at, who)"
        " SELECT kind, project, name, revision, 'create', uid, generation, origin, labels, annotations, spec,"
        " deleted, created_at, updated_at, 'system' FROM objects WHERE NOT deleted"
    )
    op.create_table(
        "audit",
        sa.Column("revision", _revision, primary_key=True, autoincrement=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("who", sa.String, nullable=False),
        sa.Column("address", sa.String, nullable=True),
        sa.Column("request_id", sa.String, nullable=True),
        sa.Column("trace_id", sa.String, nullable=True),
        sa.Column("kind", _key, nullable=False),
        sa.Column("project", _key, nullable=False),
        sa.Column("name", _key, nullable=False),
        sa.Column("operation", sa.String, nullable=False),
        sa.Column("generation", sa.BigInteger, nullable=False),
        sa.CheckConstraint("operation IN ('create', 'update', 'delete')", name="ck_audit_operation"),
    )
    op.create_index("ix_audit_at", "audit", ["at"])


def downgrade() -> None:
    op.drop_index("ix_audit_at", table_name="audit")
    op.drop_table("audit")
    op.drop_table("history")
