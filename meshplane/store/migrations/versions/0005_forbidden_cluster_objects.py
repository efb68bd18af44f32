"""Delete what clusters published before they were allowed only the kinds a cluster makes.

Such an object (a KeySet, an ApplicationKey, a Subscription, a Project, ... of origin `cluster/<name>`) was
delivered fleet-wide; a read-only kind could not even be deleted through the API. Each is deleted here as
the store deletes: at the next revision, with its event, so every replica's projection and every agent see
it go. The kinds kept are those a cluster may make as of this revision (frozen here, as a migration must be).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

KEPT = ("API", "ServiceEndpoint")
"""What a cluster may originate: its own APIs, and the ServiceEndpoints of its service catalog."""

_objects = sa.table(
    "objects",
    sa.column("kind", sa.String),
    sa.column("project", sa.String),
    sa.column("name", sa.String),
    sa.column("origin", sa.String),
    sa.column("revision", sa.BigInteger),
    sa.column("updated_at", sa.DateTime(timezone=True)),
    sa.column("deleted", sa.Boolean),
)
_events = sa.table(
    "events",
    sa.column("revision", sa.BigInteger),
    sa.column("op", sa.String),
    sa.column("kind", sa.String),
    sa.column("project", sa.String),
    sa.column("name", sa.String),
    sa.column("created_at", sa.DateTime(timezone=True)),
)
_meta = sa.table("meta", sa.column("id", sa.Integer), sa.column("revision", sa.BigInteger))


def upgrade() -> None:
    bind = op.get_bind()
    forbidden = bind.execute(
        sa.select(_objects.c.kind, _objects.c.project, _objects.c.name)
        .where(_objects.c.origin.like("cluster/%"), _objects.c.kind.not_in(KEPT), _objects.c.deleted.is_(False))
        .order_by(_objects.c.kind, _objects.c.project, _objects.c.name)
    ).all()
    if not forbidden:
        return
    revision = bind.execute(sa.select(_meta.c.revision).where(_meta.c.id == 1)).scalar_one()
    now = datetime.now(UTC)
    for kind, project, name in forbidden:
        revision += 1
        key = (_objects.c.kind == kind, _objects.c.project == project, _objects.c.name == name)
        bind.execute(sa.update(_objects).where(*key).values(deleted=True, revision=revision, updated_at=now))
        bind.execute(
            sa.insert(_events).values(
                revision=revision, op="delete", kind=kind, project=project, name=name, created_at=now
            )
        )
    bind.execute(sa.update(_meta).where(_meta.c.id == 1).values(revision=revision))


def downgrade() -> None:
    """Nothing to restore: the deleted objects were never the fleet's to serve."""
