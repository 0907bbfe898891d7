"""queues: the settings the hosted service answers in getQueue beyond its published spec
(notReadyTimeoutHours, enqueueingLabel, labelCommandsEnabled, allowedBotSubmitters,
stateLabelsEnabled, extensionEnabled, testBranchConstructionMode, batchingRules).

Plain add_column (no batch mode): on SQLite a batch copy of `queues` would cascade the deletion
of its entries and runs, and drop the queue-version triggers of 0019.

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-28 11:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS: tuple[sa.Column[object], ...] = (
    sa.Column("not_ready_timeout_hours", sa.Integer(), server_default="0", nullable=False),
    sa.Column("enqueueing_label", sa.String(255), nullable=True),
    sa.Column("label_commands_enabled", sa.Boolean(), server_default=sa.true(), nullable=False),
    sa.Column("allowed_bot_submitters", sa.JSON(), server_default="[]", nullable=False),
    sa.Column("state_labels_enabled", sa.Boolean(), server_default=sa.false(), nullable=False),
    sa.Column("extension_enabled", sa.Boolean(), server_default=sa.false(), nullable=False),
    sa.Column(
        "test_branch_construction_mode",
        sa.String(32),
        server_default="rename_temp_branch",
        nullable=False,
    ),
    sa.Column("batching_rules", sa.JSON(), server_default="[]", nullable=False),
)


def upgrade() -> None:
    for column in _COLUMNS:
        op.add_column("queues", column)


def downgrade() -> None:
    for column in reversed(_COLUMNS):
        op.drop_column("queues", column.name)
