"""Uploads stored once per key, only failed attempts kept one by one, a commit's failures indexed

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-25 06:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain add_column (no batch mode): on SQLite a batch copy of `test_uploads` would
    # cascade the deletion of its results.
    op.add_column("test_uploads", sa.Column("upload_key", sa.String(64), nullable=True))
    op.add_column("test_uploads", sa.Column("failed_tests", sa.JSON(), nullable=True))
    op.create_index(
        "ux_test_uploads_repository_key",
        "test_uploads",
        ["repository_id", "upload_key"],
        unique=True,
    )
    op.create_index(
        "ix_test_commit_rollups_failed",
        "test_commit_rollups",
        ["repository_id", "commit_sha"],
        postgresql_where=sa.text("failures > 0"),
        sqlite_where=sa.text("failures > 0"),
    )
    # The roll-ups lose their foreign key to the test (see TestHourRow) and the commit
    # roll-up its index by time (its key, which starts with the test, serves those reads).
    # No table references these two, so rebuilding them on SQLite cascades nothing.
    op.drop_index("ix_test_commit_rollups_test_run", table_name="test_commit_rollups")
    for table in ("test_hourly_rollups", "test_commit_rollups"):
        with op.batch_alter_table(table) as batch:
            batch.drop_constraint(f"fk_{table}_repository_id_test_cases", type_="foreignkey")
    op.drop_index("ix_test_results_repository_outcome_at", table_name="test_results")
    op.create_index(
        "ix_test_results_failed_at",
        "test_results",
        ["repository_id", "outcome", "at", "test_case_id"],
    )
    candidate = sa.text("status = 'flaky' OR quarantine_override IS NOT NULL")
    op.create_index(
        "ix_test_cases_quarantine_candidates",
        "test_cases",
        ["repository_id", "name", "id"],
        postgresql_where=candidate,
        sqlite_where=candidate,
    )
    # PR numbers go to 2^32 - 1 (SQLite's INTEGER holds them already).
    if op.get_bind().dialect.name == "postgresql":
        for table in ("test_uploads", "test_commit_rollups"):
            op.alter_column(table, "pr_number", type_=sa.BigInteger(), existing_nullable=True)
    # Passes and skips were kept one by one but never read back: the roll-ups count them.
    op.execute("DELETE FROM test_results WHERE outcome <> 'failed'")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table in ("test_uploads", "test_commit_rollups"):
            op.alter_column(table, "pr_number", type_=sa.Integer(), existing_nullable=True)
    op.drop_index("ix_test_cases_quarantine_candidates", table_name="test_cases")
    op.drop_index("ix_test_results_failed_at", table_name="test_results")
    op.create_index(
        "ix_test_results_repository_outcome_at",
        "test_results",
        ["repository_id", "outcome", "at"],
    )
    for table in ("test_hourly_rollups", "test_commit_rollups"):
        with op.batch_alter_table(table) as batch:
            batch.create_foreign_key(
                f"fk_{table}_repository_id_test_cases",
                "test_cases",
                ["repository_id", "test_case_id"],
                ["repository_id", "id"],
                ondelete="CASCADE",
            )
    op.create_index(
        "ix_test_commit_rollups_test_run",
        "test_commit_rollups",
        ["repository_id", "test_case_id", "last_run_at"],
    )
    op.drop_index("ix_test_commit_rollups_failed", table_name="test_commit_rollups")
    op.drop_index("ux_test_uploads_repository_key", table_name="test_uploads")
    op.drop_column("test_uploads", "failed_tests")
    op.drop_column("test_uploads", "upload_key")
