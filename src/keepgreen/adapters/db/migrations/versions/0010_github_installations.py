"""GitHub App installations, their repositories, and the feedback shown on PRs

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24 23:44:48
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import keepgreen.adapters.db.types

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "github_installations",
        sa.Column("id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("account", sa.String(length=255), nullable=False),
        sa.Column("org_id", sa.String(length=36), nullable=True),
        sa.Column("linked", sa.Boolean(), nullable=False),
        sa.Column(
            "created_at", keepgreen.adapters.db.types.UtcDateTime(timezone=True), nullable=False
        ),
        sa.ForeignKeyConstraint(
            ["org_id"],
            ["orgs.id"],
            name=op.f("fk_github_installations_org_id_orgs"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_github_installations")),
    )
    op.create_table(
        "github_feedback",
        sa.Column("repository_id", sa.String(length=36), nullable=False),
        sa.Column("number", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("check_run_id", sa.BigInteger(), nullable=True),
        sa.Column("check_run_sha", sa.String(length=64), nullable=True),
        sa.Column("comment_id", sa.BigInteger(), nullable=True),
        sa.Column("shown", sa.String(length=64), nullable=False),
        sa.Column("shown_comment", sa.String(length=64), nullable=False),
        sa.Column(
            "shown_at", keepgreen.adapters.db.types.UtcDateTime(timezone=True), nullable=True
        ),
        sa.Column("merged_sha", sa.String(length=64), nullable=True),
        sa.ForeignKeyConstraint(
            ["repository_id"],
            ["repositories.id"],
            name=op.f("fk_github_feedback_repository_id_repositories"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("repository_id", "number", name=op.f("pk_github_feedback")),
    )
    op.add_column("queues", sa.Column("host_required_statuses", sa.JSON(), nullable=True))
    # Plain ADD COLUMNs (see 0007: a batch would rebuild `repositories` and cascade-delete).
    op.add_column(
        "repositories", sa.Column("github_installation_id", sa.BigInteger(), nullable=True)
    )


def downgrade() -> None:
    op.drop_column("queues", "host_required_statuses")
    op.drop_column("repositories", "github_installation_id")
    op.drop_table("github_feedback")
    op.drop_table("github_installations")
