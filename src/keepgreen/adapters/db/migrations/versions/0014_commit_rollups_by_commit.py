"""Commit roll-ups keyed by commit first, and a test's failing commits indexed

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-25 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "test_commit_rollups"
FAILING = sa.text("failures > 0")


def _key(columns: list[str]) -> None:
    # The partial index is dropped around SQLite's copy of the table, which would otherwise
    # carry it over without its WHERE clause. No table references this one: the copy
    # cascades nothing.
    op.drop_index("ix_test_commit_rollups_failed", table_name=TABLE)
    if op.get_bind().dialect.name == "postgresql":
        op.drop_constraint("pk_test_commit_rollups", TABLE, type_="primary")
        op.create_primary_key("pk_test_commit_rollups", TABLE, columns)
    else:
        with op.batch_alter_table(TABLE, recreate="always") as batch:
            batch.drop_constraint("pk_test_commit_rollups", type_="primary")
            batch.create_primary_key("pk_test_commit_rollups", columns)
    op.create_index(
        "ix_test_commit_rollups_failed",
        TABLE,
        ["repository_id", "commit_sha"],
        postgresql_where=FAILING,
        sqlite_where=FAILING,
    )


def upgrade() -> None:
    _key(["repository_id", "commit_sha", "test_case_id"])
    op.create_index(
        "ix_test_commit_rollups_failing_test",
        TABLE,
        ["repository_id", "test_case_id"],
        postgresql_where=FAILING,
        sqlite_where=FAILING,
    )


def downgrade() -> None:
    op.drop_index("ix_test_commit_rollups_failing_test", table_name=TABLE)
    _key(["repository_id", "test_case_id", "commit_sha"])
