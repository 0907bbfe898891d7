"""tokens get a name and can be revoked; repositories name their credential files

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import keepgreen.adapters.db.types

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_CREDENTIAL_COLUMNS = ("git_username", "git_token_file", "ssh_key_file", "ssh_known_hosts")


def upgrade() -> None:
    # Plain ADD COLUMNs, never a batch: on SQLite a batch rebuilds the table, and dropping the
    # old `repositories` would cascade-delete every row that refers to a repository. A NOT NULL
    # column needs a default to be added to rows that exist; they then get the name a new
    # unnamed token gets, `token-` and the start of its id.
    op.add_column(
        "api_tokens", sa.Column("name", sa.String(length=255), server_default="", nullable=False)
    )
    op.execute("UPDATE api_tokens SET name = 'token-' || substr(id, 1, 8)")
    op.add_column(
        "api_tokens",
        sa.Column(
            "revoked_at", keepgreen.adapters.db.types.UtcDateTime(timezone=True), nullable=True
        ),
    )
    for column in _CREDENTIAL_COLUMNS:
        op.add_column("repositories", sa.Column(column, sa.Text(), nullable=True))


def downgrade() -> None:
    # SQLite 3.35+ drops columns in place.
    for column in _CREDENTIAL_COLUMNS:
        op.drop_column("repositories", column)
    op.drop_column("api_tokens", "revoked_at")
    op.drop_column("api_tokens", "name")
