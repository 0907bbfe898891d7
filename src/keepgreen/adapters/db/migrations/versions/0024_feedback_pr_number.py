"""github_feedback.number holds every PR number the API takes (up to 2^32 - 1): 64 bits on
PostgreSQL, as queue_entries.number has been. Reading the feedback of PR 4294967295 was an
"integer out of range" there. SQLite's INTEGER holds it already, so only PostgreSQL changes
(in place: the queue-version triggers of 0019 do not concern this table).

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-28 14:20:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.alter_column("github_feedback", "number", type_=sa.BigInteger(), existing_nullable=False)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.alter_column("github_feedback", "number", type_=sa.Integer(), existing_nullable=False)
