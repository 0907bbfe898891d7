"""queue_entries.head_branch: the branch a PR came from when it was submitted (when the code
host tells it), so that getSubmittedPullRequest can name a PR by its branch. A column added
in place (no table rebuild), so the queue-version triggers of 0019 stay as they are.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-28 10:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("queue_entries", sa.Column("head_branch", sa.String(255), nullable=True))
    op.create_index(
        op.f("ix_queue_entries_queue_id_head_branch"),
        "queue_entries",
        ["queue_id", "head_branch"],
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_queue_entries_queue_id_head_branch"), table_name="queue_entries")
    with op.batch_alter_table("queue_entries") as batch:
        batch.drop_column("head_branch")
