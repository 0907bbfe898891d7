"""flaky_settings.auto_quarantine_broken: whether a repository quarantines its broken tests
without a person's override (off, as before, for every repository that has settings); and the
quarantine candidates' partial index takes in broken tests, which may now be quarantined.

Neither step rebuilds a table: the column is a plain ALTER TABLE on SQLite too (no batch mode,
which would copy `flaky_settings` and drop the old one), and an index is dropped and created
apart from its table. So no trigger is lost (0019's are on the queue tables, untouched here).

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-26 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_test_cases_quarantine_candidates"
COLUMNS = ["repository_id", "name", "id"]
# As tables.QUARANTINE_CANDIDATE says it now, and as 0013 said it before.
CANDIDATE = "status IN ('flaky', 'broken') OR quarantine_override IS NOT NULL"
FLAKY_CANDIDATE = "status = 'flaky' OR quarantine_override IS NOT NULL"


def upgrade() -> None:
    op.add_column(
        "flaky_settings",
        sa.Column(
            "auto_quarantine_broken", sa.Boolean(), server_default=sa.false(), nullable=False
        ),
    )
    _candidates(CANDIDATE)


def downgrade() -> None:
    _candidates(FLAKY_CANDIDATE)
    op.drop_column("flaky_settings", "auto_quarantine_broken")  # SQLite 3.35 and newer


def _candidates(condition: str) -> None:
    """The candidates' index again, under `condition`."""
    op.drop_index(INDEX, table_name="test_cases")
    where = sa.text(condition)
    op.create_index(INDEX, "test_cases", COLUMNS, postgresql_where=where, sqlite_where=where)
