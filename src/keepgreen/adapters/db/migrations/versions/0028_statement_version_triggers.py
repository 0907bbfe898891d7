"""PostgreSQL: the queue counters (`version`, 0019; `decision_version`, 0027) moved once per
statement, not once per row.

The row-level triggers updated the queue's row once for each row written: a merge button's
write of four PRs (the positions, their entries and history lines) updated it nine times,
each update a new version of the row to skip for every read until vacuumed, and each after
the first made PostgreSQL check the row's foreign key again (its old version was the
transaction's own). Under a flood of first submits those updates and checks were over a
third of the server's time for the write.

Each table now has one trigger per event, FOR EACH STATEMENT, which reads the rows the
statement wrote (its transition tables) and moves each queue they belong to once: `version`
by one, `decision_version` by one unless every row of that queue is a PR entering unread (as
in 0027). The counters are compared, never counted, so moving once per statement says all
they said. The row-level functions stay (the downgrade puts their triggers back). SQLite has
no statement-level triggers: its own stay as 0027 made them.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-07 05:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The queues a written row (as `r`) belongs to: (the queues' column, the row's value of it).
QUEUE_TABLES = ("queue_entries", "test_runs", "queue_effects", "queue_incidents",
                "state_changes", "impacted_targets")  # fmt: skip
OTHER_TABLES = {
    "test_run_entries": (
        "id", "(SELECT queue_id FROM test_runs WHERE test_runs.id = r.test_run_id)"
    ),
    "commit_statuses": ("repository_id", "r.repository_id"),
    "repositories": ("repository_id", "r.id"),
}  # fmt: skip
KEYS = dict.fromkeys(QUEUE_TABLES, ("id", "r.queue_id")) | OTHER_TABLES
# Inserted rows that leave the decision's counter where it is (as 0027).
UNREAD_ENTERING = {
    "queue_entries": "r.head_sha = ''",
    "state_changes": "r.reason = 'submitted'",
}
# Each event's transition tables, and the rows they name together.
EVENTS = {
    "INSERT": ("NEW TABLE AS new_rows", "new_rows"),
    "UPDATE": (
        "OLD TABLE AS old_rows NEW TABLE AS new_rows",
        "(SELECT * FROM new_rows UNION ALL SELECT * FROM old_rows)",
    ),
    "DELETE": ("OLD TABLE AS old_rows", "old_rows"),
}


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, (column, key) in KEYS.items():
        op.execute(f"DROP TRIGGER IF EXISTS kg_version_{table} ON {table}")
        for event, (transitions, rows) in EVENTS.items():
            skip = UNREAD_ENTERING.get(table) if event == "INSERT" else None
            step = "1" if skip is None else f"CASE WHEN {skip} THEN 0 ELSE 1 END"
            name = f"kg_version_{table}_{event.lower()}"
            op.execute(
                f"""CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    UPDATE queues SET version = queues.version + 1,
                        decision_version = queues.decision_version + moved.step
                    FROM (SELECT {key} AS key, max({step}) AS step FROM {rows} AS r
                          GROUP BY 1) AS moved
                    WHERE queues.{column} = moved.key;
                    RETURN NULL;
                END $$"""  # noqa: S608 (the module's own constants, no input)
            )
            op.execute(
                f"CREATE TRIGGER {name} AFTER {event} ON {table} REFERENCING {transitions} "
                f"FOR EACH STATEMENT EXECUTE FUNCTION {name}()"
            )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in KEYS:
        for event in EVENTS:
            name = f"kg_version_{table}_{event.lower()}"
            op.execute(f"DROP TRIGGER IF EXISTS {name} ON {table}")
            op.execute(f"DROP FUNCTION IF EXISTS {name}()")
        op.execute(
            f"CREATE TRIGGER kg_version_{table} AFTER INSERT OR UPDATE OR DELETE ON {table} "
            f"FOR EACH ROW EXECUTE FUNCTION kg_version_{table}()"
        )
