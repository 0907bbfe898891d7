"""repositories name the variables their built-in CI command gets

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24 16:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain ADD COLUMN, not a batch: on SQLite a batch rebuilds the table, and dropping the
    # old `repositories` would cascade-delete every row that refers to a repository.
    op.add_column(
        "repositories",
        sa.Column("ci_env", sa.JSON(), server_default=sa.text("'[]'"), nullable=False),
    )


def downgrade() -> None:
    op.drop_column("repositories", "ci_env")  # SQLite 3.35+ drops columns in place
