"""Hourly roll-ups keyed by hour and branch first; hour and day totals per test

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-25 09:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from keepgreen.adapters.db.types import UtcDateTime

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

HOURS = "test_hourly_rollups"
TOTALS_FILLFACTOR = 50  # percent of each page filled by inserts


def _key(columns: list[str]) -> None:
    # No table references this one: SQLite's copy of it cascades nothing.
    if op.get_bind().dialect.name == "postgresql":
        op.drop_constraint("pk_test_hourly_rollups", HOURS, type_="primary")
        op.create_primary_key("pk_test_hourly_rollups", HOURS, columns)
    else:
        with op.batch_alter_table(HOURS, recreate="always") as batch:
            batch.drop_constraint("pk_test_hourly_rollups", type_="primary")
            batch.create_primary_key("pk_test_hourly_rollups", columns)


def _totals(table: str, bucket: str) -> None:
    op.create_table(
        table,
        sa.Column("repository_id", sa.String(36), nullable=False),
        sa.Column(bucket, UtcDateTime(), nullable=False),
        sa.Column("test_case_id", sa.String(36), nullable=False),
        sa.Column("runs", sa.Integer(), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("repository_id", bucket, "test_case_id", name=f"pk_{table}"),
    )


def upgrade() -> None:
    _key(["repository_id", "hour", "branch", "test_case_id"])
    _totals("test_hour_totals", "hour")
    _totals("test_day_totals", "day")
    if op.get_bind().dialect.name == "postgresql":
        # Every upload of the hour (the day) updates the same rows: with room left on their
        # pages PostgreSQL updates them in place (HOT), without a new entry in the key.
        for table in ("test_hour_totals", "test_day_totals"):
            op.execute(f"ALTER TABLE {table} SET (fillfactor = {TOTALS_FILLFACTOR})")
    # The totals of the history kept so far, from the hourly roll-ups.
    if op.get_bind().dialect.name == "postgresql":
        day = "date_trunc('day', hour AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'"
    else:
        day = "substr(hour, 1, 10) || ' 00:00:00.000000'"  # stored as naive UTC text
    for table, bucket in (("test_hour_totals", "hour"), ("test_day_totals", day)):
        op.execute(
            f"INSERT INTO {table} SELECT repository_id, {bucket}, test_case_id,"  # noqa: S608
            f" SUM(runs), SUM(failures) FROM {HOURS}"
            f" GROUP BY repository_id, {bucket}, test_case_id"
        )


def downgrade() -> None:
    op.drop_table("test_day_totals")
    op.drop_table("test_hour_totals")
    _key(["repository_id", "test_case_id", "hour", "branch"])
