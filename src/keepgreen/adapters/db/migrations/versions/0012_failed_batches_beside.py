"""Failed batches isolated beside the queue, and the adaptive batch size and depth

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25 03:15:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain add_column (no batch mode): on SQLite a batch copy of `queues` would cascade the
    # deletion of its entries and runs.
    op.add_column(
        "queues",
        sa.Column("bisect_beside_queue", sa.Boolean(), server_default=sa.true(), nullable=False),
    )
    op.add_column(
        "queues",
        sa.Column("adaptive_batch_size", sa.Boolean(), server_default=sa.false(), nullable=False),
    )
    op.add_column(
        "queues",
        sa.Column("adaptive_depth", sa.Boolean(), server_default=sa.false(), nullable=False),
    )


def downgrade() -> None:
    for column in ("adaptive_depth", "adaptive_batch_size", "bisect_beside_queue"):
        op.drop_column("queues", column)
