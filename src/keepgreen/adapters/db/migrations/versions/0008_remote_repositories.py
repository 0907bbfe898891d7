"""repositories name their PR refspec and test branch prefix; queues keep a history of
code-host incidents (a server unreachable, credentials refused, a push rejected)

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import keepgreen.adapters.db.types

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_REPOSITORY_COLUMNS = ("pr_refspec", "test_branch_prefix")


def upgrade() -> None:
    # Plain ADD COLUMNs (see 0007: a batch would rebuild `repositories` and cascade-delete).
    # NULL means the documented default, so rows that exist keep behaving as before.
    for column in _REPOSITORY_COLUMNS:
        op.add_column("repositories", sa.Column(column, sa.Text(), nullable=True))
    op.create_table(
        "queue_incidents",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("queue_id", sa.String(length=36), nullable=False),
        sa.Column("pr_number", sa.BigInteger(), nullable=True),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column(
            "started_at", keepgreen.adapters.db.types.UtcDateTime(timezone=True), nullable=False
        ),
        sa.Column(
            "last_failure_at",
            keepgreen.adapters.db.types.UtcDateTime(timezone=True),
            nullable=False,
        ),
        sa.Column(
            "ended_at", keepgreen.adapters.db.types.UtcDateTime(timezone=True), nullable=True
        ),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["queue_id"], ["queues.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_queue_incidents_queue_id_ended_at", "queue_incidents", ["queue_id", "ended_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_queue_incidents_queue_id_ended_at", table_name="queue_incidents")
    op.drop_table("queue_incidents")
    for column in _REPOSITORY_COLUMNS:
        op.drop_column("repositories", column)
