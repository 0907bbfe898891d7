"""GitHub webhook deliveries: stored as they arrive, for the worker to act on

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import keepgreen.adapters.db.types

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "github_deliveries",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("event", sa.String(length=64), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=True),
        sa.Column("installation_id", sa.BigInteger(), nullable=True),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column(
            "received_at", keepgreen.adapters.db.types.UtcDateTime(timezone=True), nullable=False
        ),
        sa.Column(
            "processed_at", keepgreen.adapters.db.types.UtcDateTime(timezone=True), nullable=True
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_github_deliveries_processed_at", "github_deliveries", ["processed_at", "received_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_github_deliveries_processed_at", table_name="github_deliveries")
    op.drop_table("github_deliveries")
