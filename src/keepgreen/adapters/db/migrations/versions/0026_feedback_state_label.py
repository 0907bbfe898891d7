"""github_feedback.state_label: the state label keepgreen put on a PR on GitHub when its
queue has `stateLabelsEnabled` (`keepgreen:queued`, `keepgreen:testing`, `keepgreen:failed`),
so that it is changed only when the PR's state moves, and taken off when it leaves.

Plain add_column: github_feedback has no queue-version trigger to lose in a batch copy, but
SQLite adds a nullable column in place anyway.

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-28 16:55:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("github_feedback", sa.Column("state_label", sa.String(64), nullable=True))


def downgrade() -> None:
    op.drop_column("github_feedback", "state_label")
