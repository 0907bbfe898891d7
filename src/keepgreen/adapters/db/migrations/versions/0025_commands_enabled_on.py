"""queues.commands_enabled now decides whether `/keepgreen merge` and `/keepgreen cancel`
comments act on the queue (the hosted service's `commandsEnabled`). Until now it was stored
and answered but did nothing, and queues were created with it off; every queue answered
comment commands. It is set on for every existing queue, so that none stops answering
them at the upgrade; a queue that wants them off sets it with updateQueue.

An UPDATE only (no schema change): the column keeps no server default, keepgreen always
writes it.

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-28 16:50:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("UPDATE queues SET commands_enabled = true WHERE NOT commands_enabled")


def downgrade() -> None:
    pass  # the value is kept: earlier versions store it without acting on it
