"""queues.version: a counter that every write to what a queue's answers show moves on (the
queue's row, its entries, runs and their entries, effects, incidents, state changes and
impacted targets; its repository's row and commit statuses), kept by triggers so that no write
path can forget it. The API serves getQueue and getSubmittedPullRequest from snapshots keyed by
it.

On SQLite, a later migration that rebuilds one of these tables (batch mode) drops its triggers
with it and must create them again; tests/web/test_polled_snapshots.py checks they are all
there at head.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-25 18:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# (table, the SQL that names the queues a row of it belongs to, given the row as ROW)
QUEUE_TABLES = ("queue_entries", "test_runs", "queue_effects", "queue_incidents",
                "state_changes", "impacted_targets")  # fmt: skip
OTHER_TABLES = {
    "test_run_entries": "id = (SELECT queue_id FROM test_runs WHERE id = ROW.test_run_id)",
    "commit_statuses": "repository_id = ROW.repository_id",
    "repositories": "repository_id = ROW.id",
}
WHERE = dict.fromkeys(QUEUE_TABLES, "id = ROW.queue_id") | OTHER_TABLES
EVENTS = ("INSERT", "UPDATE", "DELETE")


def upgrade() -> None:
    # A plain ALTER TABLE on SQLite too: batch mode would rebuild the table, and dropping the
    # old one cascades (foreign keys are on) to every queue's entries and runs.
    op.add_column(
        "queues", sa.Column("version", sa.BigInteger(), server_default="0", nullable=False)
    )
    if op.get_bind().dialect.name == "postgresql":
        _postgresql_triggers()
    else:
        _sqlite_triggers()


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table in WHERE:
            op.execute(f"DROP TRIGGER IF EXISTS kg_version_{table} ON {table}")
            op.execute(f"DROP FUNCTION IF EXISTS kg_version_{table}()")
        op.execute("DROP TRIGGER IF EXISTS kg_version_queues ON queues")
        op.execute("DROP FUNCTION IF EXISTS kg_version_queues()")
    else:
        for table in WHERE:
            for event in EVENTS:
                op.execute(f"DROP TRIGGER IF EXISTS kg_version_{table}_{event.lower()}")
        op.execute("DROP TRIGGER IF EXISTS kg_version_queues")
    op.drop_column("queues", "version")  # ALTER TABLE ... DROP COLUMN (SQLite 3.35 and newer)


def _postgresql_triggers() -> None:
    # A write to the queue's own row moves it on, unless the write is that move.
    op.execute(
        """CREATE FUNCTION kg_version_queues() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.version = OLD.version THEN NEW.version := OLD.version + 1; END IF;
            RETURN NEW;
        END $$"""
    )
    op.execute(
        "CREATE TRIGGER kg_version_queues BEFORE UPDATE ON queues "
        "FOR EACH ROW EXECUTE FUNCTION kg_version_queues()"
    )
    for table, where in WHERE.items():
        new, old = where.replace("ROW.", "NEW."), where.replace("ROW.", "OLD.")
        op.execute(
            f"""CREATE FUNCTION kg_version_{table}() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF TG_OP <> 'DELETE' THEN
                    UPDATE queues SET version = version + 1 WHERE {new};
                END IF;
                IF TG_OP <> 'INSERT' THEN
                    UPDATE queues SET version = version + 1 WHERE {old};
                END IF;
                RETURN NULL;
            END $$"""  # noqa: S608 (the module's own constants, no input)
        )
        op.execute(
            f"CREATE TRIGGER kg_version_{table} AFTER INSERT OR UPDATE OR DELETE ON {table} "
            f"FOR EACH ROW EXECUTE FUNCTION kg_version_{table}()"
        )


def _sqlite_triggers() -> None:
    # SQLite runs no trigger from within itself (recursive_triggers is off), and the WHEN
    # leaves alone an update that is the move itself.
    op.execute(
        "CREATE TRIGGER kg_version_queues AFTER UPDATE ON queues "
        "FOR EACH ROW WHEN NEW.version = OLD.version BEGIN "
        "UPDATE queues SET version = OLD.version + 1 WHERE id = NEW.id; END"
    )
    for table, where in WHERE.items():
        for event in EVENTS:
            rows = {"INSERT": ("NEW",), "UPDATE": ("NEW", "OLD"), "DELETE": ("OLD",)}[event]
            updates = " ".join(
                f"UPDATE queues SET version = version + 1 WHERE {where.replace('ROW.', row)};"  # noqa: S608 (the module's own constants)
                for row in (f"{name}." for name in rows)
            )
            op.execute(
                f"CREATE TRIGGER kg_version_{table}_{event.lower()} AFTER {event} ON {table} "
                f"FOR EACH ROW BEGIN {updates} END"
            )
