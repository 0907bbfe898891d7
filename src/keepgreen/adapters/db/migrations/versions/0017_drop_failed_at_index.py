"""Raw failed attempts lose ix_test_results_failed_at: list-failing-tests now ranks from the
per-day counts (0016) and reads raw attempts only per test (ix_test_results_test_case_at), so
the index was written for every failed attempt and read by nothing

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-25 15:20:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_test_results_failed_at"


def upgrade() -> None:
    op.drop_index(INDEX, table_name="test_results")


def downgrade() -> None:
    op.create_index(INDEX, "test_results", ["repository_id", "outcome", "at", "test_case_id"])
