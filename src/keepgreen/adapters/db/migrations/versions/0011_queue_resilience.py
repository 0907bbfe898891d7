"""A queue's own settings against stalls and spurious failures, what it learned from its runs,
the attempt and failure detail of a run, and the detail of a history line

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25 02:50:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain add_column (no batch mode): on SQLite a batch copy of `queues` would cascade the
    # deletion of its entries and runs.
    op.add_column(
        "queues",
        sa.Column("check_start_timeout_minutes", sa.Integer(), server_default="30", nullable=False),
    )
    op.add_column(
        "queues",
        sa.Column(
            "adaptive_testing_timeout", sa.Boolean(), server_default=sa.false(), nullable=False
        ),
    )
    op.add_column(
        "queues", sa.Column("stall_minutes", sa.Integer(), server_default="60", nullable=False)
    )
    op.add_column(
        "queues",
        sa.Column("accept_skipped_checks", sa.Boolean(), server_default=sa.false(), nullable=False),
    )
    op.add_column(
        "queues", sa.Column("max_retries", sa.Integer(), server_default="0", nullable=False)
    )
    op.add_column(
        "queues",
        sa.Column("flaky_failures", sa.String(length=32), server_default="retry", nullable=False),
    )
    op.add_column("queues", sa.Column("stats", sa.JSON(), nullable=True))
    op.add_column("state_changes", sa.Column("detail", sa.Text(), nullable=True))
    op.add_column(
        "test_runs", sa.Column("attempt", sa.Integer(), server_default="0", nullable=False)
    )
    op.add_column("test_runs", sa.Column("failure_detail", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("test_runs", "failure_detail")
    op.drop_column("test_runs", "attempt")
    op.drop_column("state_changes", "detail")
    for column in (
        "stats",
        "flaky_failures",
        "max_retries",
        "accept_skipped_checks",
        "stall_minutes",
        "adaptive_testing_timeout",
        "check_start_timeout_minutes",
    ):
        op.drop_column("queues", column)
