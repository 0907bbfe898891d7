"""Dashboard sign-ins: web_sessions keeps the hash of each session cookie's secret, the org,
the API token it was opened with (none when signed in with GitHub), and when it expires

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-25 16:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from keepgreen.adapters.db.types import UtcDateTime

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "web_sessions",
        sa.Column("secret_hash", sa.String(64), nullable=False),
        sa.Column("org_id", sa.String(36), nullable=False),
        sa.Column("token_id", sa.String(36), nullable=True),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("expires_at", UtcDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["org_id"], ["orgs.id"], name=op.f("fk_web_sessions_org_id_orgs"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["token_id"],
            ["api_tokens.id"],
            name=op.f("fk_web_sessions_token_id_api_tokens"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("secret_hash", name=op.f("pk_web_sessions")),
    )
    for column in ("org_id", "token_id", "expires_at"):
        op.create_index(op.f(f"ix_web_sessions_{column}"), "web_sessions", [column])


def downgrade() -> None:
    op.drop_table("web_sessions")
