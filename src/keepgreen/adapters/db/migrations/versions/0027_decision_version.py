"""queues.decision_version: a second counter, moved by the same triggers as `version` (0019) at
every write to what a queue's answers show, except the writes of a PR entering unread (its
entry inserted with no head yet, its `submitted` history line, and the positions it takes on
the queue's row). Nothing the scheduler decides on changes with those: the worker loads and
decides a queue without holding it, and writes its decision only if this counter has not
moved meanwhile (else it decides again, holding the queue), so that a flood of merge buttons
neither waits for its decisions nor makes it start them over.

The triggers of 0019 are replaced by ones that move both counters (same names; on SQLite no
table is rebuilt, so no other trigger is lost).

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-29 03:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# As in 0019: (table, the SQL that names the queues a row of it belongs to, given the row as ROW)
QUEUE_TABLES = ("queue_entries", "test_runs", "queue_effects", "queue_incidents",
                "state_changes", "impacted_targets")  # fmt: skip
OTHER_TABLES = {
    "test_run_entries": "id = (SELECT queue_id FROM test_runs WHERE id = ROW.test_run_id)",
    "commit_statuses": "repository_id = ROW.repository_id",
    "repositories": "repository_id = ROW.id",
}
WHERE = dict.fromkeys(QUEUE_TABLES, "id = ROW.queue_id") | OTHER_TABLES
EVENTS = ("INSERT", "UPDATE", "DELETE")
# Inserted rows that leave the decision's counter where it is (true of the row as NEW).
UNREAD_ENTERING = {
    "queue_entries": "NEW.head_sha = ''",
    "state_changes": "NEW.reason = 'submitted'",
}


def upgrade() -> None:
    op.add_column(
        "queues",
        sa.Column("decision_version", sa.BigInteger(), server_default="0", nullable=False),
    )
    if op.get_bind().dialect.name == "postgresql":
        _postgresql_triggers(decision=True)
    else:
        _drop_sqlite_triggers()
        _sqlite_triggers(decision=True)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _postgresql_triggers(decision=False)
    else:
        _drop_sqlite_triggers()
        _sqlite_triggers(decision=False)
    op.drop_column("queues", "decision_version")


def _moves(decision: bool, skip: str | None = None) -> str:
    """The SET clause of a write to what a queue's answers show (`skip`: when the decision's
    counter stays).
    """
    if not decision:
        return "version = version + 1"
    step = "1" if skip is None else f"CASE WHEN {skip} THEN 0 ELSE 1 END"
    return f"version = version + 1, decision_version = decision_version + {step}"


def _postgresql_triggers(*, decision: bool) -> None:
    # A write to the queue's own row moves it on, unless the write is that move; it moves the
    # decision's counter too unless it only took positions.
    own = (
        "IF NEW.position_seq = OLD.position_seq THEN "
        "NEW.decision_version := OLD.decision_version + 1; END IF;"
        if decision
        else ""
    )
    op.execute(
        f"""CREATE OR REPLACE FUNCTION kg_version_queues() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.version = OLD.version THEN
                NEW.version := OLD.version + 1;
                {own}
            END IF;
            RETURN NEW;
        END $$"""
    )
    for table, where in WHERE.items():
        new, old = where.replace("ROW.", "NEW."), where.replace("ROW.", "OLD.")
        skip = UNREAD_ENTERING.get(table)
        inserted = None if skip is None else f"TG_OP = 'INSERT' AND {skip}"
        op.execute(
            f"""CREATE OR REPLACE FUNCTION kg_version_{table}() RETURNS trigger
            LANGUAGE plpgsql AS $$
            BEGIN
                IF TG_OP <> 'DELETE' THEN
                    UPDATE queues SET {_moves(decision, inserted)} WHERE {new};
                END IF;
                IF TG_OP <> 'INSERT' THEN
                    UPDATE queues SET {_moves(decision)} WHERE {old};
                END IF;
                RETURN NULL;
            END $$"""  # noqa: S608 (the module's own constants, no input)
        )


def _drop_sqlite_triggers() -> None:
    for table in WHERE:
        for event in EVENTS:
            op.execute(f"DROP TRIGGER IF EXISTS kg_version_{table}_{event.lower()}")
    op.execute("DROP TRIGGER IF EXISTS kg_version_queues")


def _sqlite_triggers(*, decision: bool) -> None:
    # SQLite runs no trigger from within itself (recursive_triggers is off), and the WHEN
    # leaves alone an update that is the move itself.
    own = (
        ", decision_version = OLD.decision_version + (NEW.position_seq = OLD.position_seq)"
        if decision
        else ""
    )
    move = f"UPDATE queues SET version = OLD.version + 1{own} WHERE id = NEW.id;"  # noqa: S608
    op.execute(
        "CREATE TRIGGER kg_version_queues AFTER UPDATE ON queues "
        f"FOR EACH ROW WHEN NEW.version = OLD.version BEGIN {move} END"
    )
    for table, where in WHERE.items():
        for event in EVENTS:
            rows = {"INSERT": ("NEW",), "UPDATE": ("NEW", "OLD"), "DELETE": ("OLD",)}[event]
            skip = UNREAD_ENTERING.get(table) if event == "INSERT" else None
            updates = " ".join(
                f"UPDATE queues SET {_moves(decision, skip)} "  # noqa: S608 (the module's own constants)
                f"WHERE {where.replace('ROW.', row)};"
                for row in (f"{name}." for name in rows)
            )
            op.execute(
                f"CREATE TRIGGER kg_version_{table}_{event.lower()} AFTER {event} ON {table} "
                f"FOR EACH ROW BEGIN {updates} END"
            )
