"""tenant scoped tests: a test is keyed by (repository, test id)

Test ids are public (UUIDv5 of public names, or whatever a report's `id` says), so a test id
alone let one org's upload write into another org's test. The test case key becomes
(repository_id, id) and every row about a test carries its repository and references the test
by both columns.

Existing rows: rollups and status history take the repository of the test they belong to
(ids were unique, so that is unambiguous). Raw results stored under another repository's test
(the uploading repository differs from the test's) were the cross-tenant writes this closes;
they name no test of their own repository and are deleted. Rollups cannot be split by who
uploaded, so they stay with the test they were added to.

SQLite rebuilds a table to change its keys. With foreign keys on, dropping a referenced table
deletes its children in cascade, so the order matters: the children first let go of
test_cases, then test_cases is rebuilt, then the children reference it again.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24 16:40:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.String(length=36)

# The tables with rows about a test, and the rollups' primary keys before the repository joins.
ROLLUPS = {
    "test_hourly_rollups": ("test_case_id", "hour", "branch"),
    "test_commit_rollups": ("test_case_id", "commit_sha"),
    "test_failure_summaries": ("test_case_id", "day", "summary_key"),
}
CHILDREN = ("test_results", "test_status_changes", *ROLLUPS)

test_cases = sa.table(
    "test_cases", sa.column("id"), sa.column("repository_id"), sa.column("first_seen_at")
)


def _child(name: str) -> sa.TableClause:
    return sa.table(name, sa.column("repository_id"), sa.column("test_case_id"))


def _fill_repository_ids(name: str) -> None:
    child = _child(name)
    owner = sa.select(test_cases.c.repository_id).where(test_cases.c.id == child.c.test_case_id)
    op.execute(child.update().values(repository_id=owner.scalar_subquery()))


def _earlier_of_same_id(test: sa.FromClause) -> sa.Exists:
    """Whether another repository has a test with `test`'s id, seen first (the one kept when
    ids become unique again).
    """
    first = test_cases.alias("first")
    return sa.exists().where(
        first.c.id == test.c.id,
        sa.tuple_(first.c.first_seen_at, first.c.repository_id)
        < sa.tuple_(test.c.first_seen_at, test.c.repository_id),
    )


def upgrade() -> None:
    # 1. Every child row gets its test's repository; raw results already have the uploader's.
    for table in ("test_status_changes", *ROLLUPS):
        op.add_column(table, sa.Column("repository_id", ID, nullable=True))
        _fill_repository_ids(table)
    results = _child("test_results")
    own_test = sa.exists().where(
        test_cases.c.id == results.c.test_case_id,
        test_cases.c.repository_id == results.c.repository_id,
    )
    op.execute(results.delete().where(~own_test))

    # 2. The children let go of test_cases (its key is about to change).
    for table in CHILDREN:
        with op.batch_alter_table(table) as batch_op:
            batch_op.drop_constraint(f"fk_{table}_test_case_id_test_cases", type_="foreignkey")

    # 3. test_cases is keyed by (repository_id, id).
    with op.batch_alter_table("test_cases") as batch_op:
        batch_op.drop_constraint("pk_test_cases", type_="primary")
        batch_op.create_primary_key("pk_test_cases", ["repository_id", "id"])

    # 4. The children reference it by both columns, and rollups are keyed by them.
    for table, key in ROLLUPS.items():
        with op.batch_alter_table(table) as batch_op:
            batch_op.alter_column("repository_id", existing_type=ID, nullable=False)
            batch_op.drop_constraint(f"pk_{table}", type_="primary")
            batch_op.create_primary_key(f"pk_{table}", ["repository_id", *key])
    with op.batch_alter_table("test_status_changes") as batch_op:
        batch_op.alter_column("repository_id", existing_type=ID, nullable=False)
        batch_op.drop_index("ix_test_status_changes_test_case_id")
        batch_op.create_index("ix_test_status_changes_test_case", ["repository_id", "test_case_id"])
    with op.batch_alter_table("test_results") as batch_op:
        batch_op.drop_index("ix_test_results_test_case_at")
        batch_op.create_index(
            "ix_test_results_test_case_at", ["repository_id", "test_case_id", "at"]
        )
    with op.batch_alter_table("test_commit_rollups") as batch_op:
        batch_op.drop_index("ix_test_commit_rollups_test_run")
        batch_op.create_index(
            "ix_test_commit_rollups_test_run", ["repository_id", "test_case_id", "last_run_at"]
        )
    for table in CHILDREN:
        with op.batch_alter_table(table) as batch_op:
            batch_op.create_foreign_key(
                f"fk_{table}_repository_id_test_cases",
                "test_cases",
                ["repository_id", "test_case_id"],
                ["repository_id", "id"],
                ondelete="CASCADE",
            )


def downgrade() -> None:
    # A test id used by two repositories cannot go back to one key: all but the earliest
    # seen of them (with their rows, in cascade) are dropped first.
    for table in CHILDREN:
        with op.batch_alter_table(table) as batch_op:
            batch_op.drop_constraint(f"fk_{table}_repository_id_test_cases", type_="foreignkey")
    for name in CHILDREN:
        child, owner = _child(name), test_cases.alias("owner")
        shadowed = sa.exists().where(
            owner.c.id == child.c.test_case_id,
            owner.c.repository_id == child.c.repository_id,
            _earlier_of_same_id(owner),
        )
        op.execute(child.delete().where(shadowed))
    every = test_cases.alias("every")
    shadowed_tests = sa.select(every.c.repository_id, every.c.id).where(_earlier_of_same_id(every))
    op.execute(
        test_cases.delete().where(
            sa.tuple_(test_cases.c.repository_id, test_cases.c.id).in_(shadowed_tests)
        )
    )

    with op.batch_alter_table("test_cases") as batch_op:
        batch_op.drop_constraint("pk_test_cases", type_="primary")
        batch_op.create_primary_key("pk_test_cases", ["id"])

    with op.batch_alter_table("test_commit_rollups") as batch_op:
        batch_op.drop_index("ix_test_commit_rollups_test_run")
        batch_op.create_index("ix_test_commit_rollups_test_run", ["test_case_id", "last_run_at"])
    with op.batch_alter_table("test_results") as batch_op:
        batch_op.drop_index("ix_test_results_test_case_at")
        batch_op.create_index("ix_test_results_test_case_at", ["test_case_id", "at"])
    with op.batch_alter_table("test_status_changes") as batch_op:
        batch_op.drop_index("ix_test_status_changes_test_case")
        batch_op.create_index("ix_test_status_changes_test_case_id", ["test_case_id"])
        batch_op.drop_column("repository_id")
    for table, key in ROLLUPS.items():
        with op.batch_alter_table(table) as batch_op:
            batch_op.drop_constraint(f"pk_{table}", type_="primary")
            batch_op.create_primary_key(f"pk_{table}", list(key))
            batch_op.drop_column("repository_id")
    for table in CHILDREN:
        with op.batch_alter_table(table) as batch_op:
            batch_op.create_foreign_key(
                f"fk_{table}_test_case_id_test_cases",
                "test_cases",
                ["test_case_id"],
                ["id"],
                ondelete="CASCADE",
            )
