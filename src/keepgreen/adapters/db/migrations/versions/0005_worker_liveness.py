"""worker liveness: worker heartbeats and the holder of each built-in CI run

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24 16:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import keepgreen.adapters.db.types

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "workers",
        sa.Column("holder", sa.String(length=255), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column(
            "started_at", keepgreen.adapters.db.types.UtcDateTime(timezone=True), nullable=False
        ),
        sa.Column(
            "heartbeat_at", keepgreen.adapters.db.types.UtcDateTime(timezone=True), nullable=False
        ),
        sa.PrimaryKeyConstraint("holder", name=op.f("pk_workers")),
    )
    op.create_table(
        "ci_run_holders",
        sa.Column("test_run_id", sa.String(length=36), nullable=False),
        sa.Column("holder", sa.String(length=255), nullable=False),
        sa.Column(
            "started_at", keepgreen.adapters.db.types.UtcDateTime(timezone=True), nullable=False
        ),
        sa.ForeignKeyConstraint(
            ["test_run_id"],
            ["test_runs.id"],
            name=op.f("fk_ci_run_holders_test_run_id_test_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("test_run_id", name=op.f("pk_ci_run_holders")),
    )


def downgrade() -> None:
    op.drop_table("ci_run_holders")
    op.drop_table("workers")
