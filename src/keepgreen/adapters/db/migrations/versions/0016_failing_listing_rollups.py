"""What list-failing-tests reads, kept as uploads arrive: failures per test and day, failure
templates per test and day, and the PRs a test impacted in its failing commits' index

- test_failure_days: each test's failed attempts of a day (every upload, as the raw results),
  with the first and last; filled from the raw results kept so far.
- test_failure_templates replaces test_failure_summaries: an upload mines its failures into
  the test's templates of the day. The summaries stored so far become one template each (a
  listing mines them together as before); their text and counts carry over unchanged.
- ix_test_commit_rollups_failing_test also holds last_failure_at and pr_number, so counting
  the PRs a test impacted reads the index alone.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-25 14:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from keepgreen.adapters.db.types import UtcDateTime

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.String(length=36)
COMMITS = "test_commit_rollups"
FAILING_TEST = "ix_test_commit_rollups_failing_test"
DAYS_FILLFACTOR = 50  # percent of each page filled by inserts (see 0015's totals)


def _postgresql() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def _day(column: str) -> str:
    if _postgresql():
        return f"date_trunc('day', {column} AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'"
    return f"substr({column}, 1, 10) || ' 00:00:00.000000'"  # stored as naive UTC text


def _failing_test_index(columns: list[str]) -> None:
    op.drop_index(FAILING_TEST, table_name=COMMITS)
    op.create_index(
        FAILING_TEST,
        COMMITS,
        columns,
        postgresql_where=sa.text("failures > 0"),
        sqlite_where=sa.text("failures > 0"),
    )


def _summaries_or_templates(name: str, key: sa.Column[str] | sa.Column[int]) -> None:
    op.create_table(
        name,
        sa.Column("repository_id", ID, nullable=False),
        sa.Column("test_case_id", ID, nullable=False),
        sa.Column("day", UtcDateTime(), nullable=False),
        key,
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("occurrences", sa.Integer(), nullable=False),
        sa.Column("last_at", UtcDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["repository_id", "test_case_id"],
            ["test_cases.repository_id", "test_cases.id"],
            name=op.f(f"fk_{name}_repository_id_test_cases"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "repository_id", "test_case_id", "day", key.name, name=op.f(f"pk_{name}")
        ),
    )


def upgrade() -> None:
    op.create_table(
        "test_failure_days",
        sa.Column("repository_id", ID, nullable=False),
        sa.Column("day", UtcDateTime(), nullable=False),
        sa.Column("test_case_id", ID, nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("first_at", UtcDateTime(), nullable=False),
        sa.Column("last_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint(
            "repository_id", "day", "test_case_id", name=op.f("pk_test_failure_days")
        ),
        sqlite_with_rowid=False,
    )
    if _postgresql():
        op.execute(f"ALTER TABLE test_failure_days SET (fillfactor = {DAYS_FILLFACTOR})")
    op.execute(
        "INSERT INTO test_failure_days SELECT repository_id, day, test_case_id, COUNT(*),"  # noqa: S608
        f" MIN(at), MAX(at) FROM (SELECT repository_id, {_day('at')} AS day, test_case_id, at"
        " FROM test_results WHERE outcome = 'failed') failed"
        " GROUP BY repository_id, day, test_case_id"
    )
    _summaries_or_templates(
        "test_failure_templates", sa.Column("position", sa.Integer(), nullable=False)
    )
    op.execute(
        "INSERT INTO test_failure_templates SELECT repository_id, test_case_id, day,"
        " ROW_NUMBER() OVER (PARTITION BY repository_id, test_case_id, day"
        " ORDER BY occurrences DESC, summary_key) - 1, summary, occurrences, last_at"
        " FROM test_failure_summaries"
    )
    op.drop_table("test_failure_summaries")
    _failing_test_index(["repository_id", "test_case_id", "last_failure_at", "pr_number"])


def downgrade() -> None:
    _failing_test_index(["repository_id", "test_case_id"])
    # Each template becomes a summary of its own, keyed by its position: the listing mines
    # them together as it mines summaries.
    _summaries_or_templates(
        "test_failure_summaries", sa.Column("summary_key", sa.String(32), nullable=False)
    )
    op.execute(
        "INSERT INTO test_failure_summaries SELECT repository_id, test_case_id, day,"
        " 'template-' || CAST(position AS VARCHAR(11)), summary, occurrences, last_at"
        " FROM test_failure_templates"
    )
    op.drop_table("test_failure_templates")
    op.drop_table("test_failure_days")
