"""ci_runs: the runs of CI jobs CI reports through create-ci-run, one row per run (a run
reported again, by the provider's run id, job id and attempt, is the same row)

A new table only: no table is rebuilt, so the queue-version triggers of 0019 (on repositories
among others) stay as they are. ci_runs itself carries none: no queue answer shows it.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-26 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from keepgreen.adapters.db.types import UtcDateTime

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "ci_runs",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("repository_id", sa.String(36), nullable=False),
        sa.Column("run_key", sa.String(64), nullable=True),
        sa.Column("ci_job_name", sa.String(255), nullable=False),
        sa.Column("provider", sa.String(32), nullable=True),
        sa.Column("providers_run_id", sa.String(255), nullable=True),
        sa.Column("providers_job_id", sa.String(255), nullable=True),
        sa.Column("attempt", sa.BigInteger(), nullable=False),
        sa.Column("branch", sa.String(255), nullable=False),
        sa.Column("sha", sa.String(64), nullable=False),
        sa.Column("run_start", UtcDateTime(), nullable=False),
        sa.Column("run_end", UtcDateTime(), nullable=False),
        sa.Column("run_conclusion", sa.String(32), nullable=True),
        sa.Column("run_conclusion_cause", sa.String(32), nullable=True),
        sa.Column("reported_at", UtcDateTime(), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["repository_id"],
            ["repositories.id"],
            name=op.f("fk_ci_runs_repository_id_repositories"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ci_runs")),
    )
    # A run reported again is found by its key; NULL keys (no provider's run id) never clash.
    op.create_index(
        "ux_ci_runs_repository_key", "ci_runs", ["repository_id", "run_key"], unique=True
    )
    op.create_index("ix_ci_runs_repository_start", "ci_runs", ["repository_id", "run_start"])
    op.create_index("ix_ci_runs_repository_sha", "ci_runs", ["repository_id", "sha"])


def downgrade() -> None:
    op.drop_table("ci_runs")
