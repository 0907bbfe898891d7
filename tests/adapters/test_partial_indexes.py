"""The commit roll-ups' partial indexes (`WHERE failures > 0`) serve the reads written for them,
on both backends: a bound 0 in place of the literal would leave SQLite reading each row to
check it, and a PostgreSQL prepared statement's generic plan scanning the repository's rows.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from sqlalchemy import event, select, text
from sqlalchemy.dialects import postgresql

from keepgreen.adapters.db import tables
from keepgreen.adapters.db.flaky_rows import FAILED_ON_COMMIT
from keepgreen.bootstrap import Container
from keepgreen.core.ids import RepositoryId
from tests.support.builders import T0

TEST = "5e1f0c3a-9b7e-5d2c-8a41-0c6f3b2a1d90"


def test_the_failing_commits_partial_index_serves_the_reads_written_for_it(
    container: Container,
) -> None:
    if container.engine.dialect.name == "postgresql":
        assert_a_generic_plan_uses_it(container)
    else:
        assert_prs_impacted_read_it_alone(container)


def assert_prs_impacted_read_it_alone(container: Container) -> None:
    """SQLite counts the PRs a test impacted from the index, without reading the rows."""
    executed: list[tuple[str, Any]] = []

    def capture(*args: Any) -> None:
        executed.append((args[2], args[3]))  # (statement, parameters)

    event.listen(container.engine, "before_cursor_execute", capture)
    try:
        with container.unit_of_work(read_only=True) as uow:
            uow.flaky_listings.pull_requests_impacted(RepositoryId("r"), [TEST], T0)
    finally:
        event.remove(container.engine, "before_cursor_execute", capture)
    statement, parameters = next(
        (sql, params) for sql, params in executed if "test_commit_rollups" in sql
    )
    with container.engine.connect() as connection:
        root = connection.exec_driver_sql(
            "SELECT rootpage FROM sqlite_master WHERE name = 'test_commit_rollups'"
        ).scalar_one()
        program = connection.exec_driver_sql(f"EXPLAIN {statement}", parameters).all()
    # The program opens the table (to seek a row only if a column of it is wanted), and the
    # index; no column is then read from the table's cursor.
    table_cursors = {op[2] for op in program if op[1] == "OpenRead" and op[3] == root}
    assert table_cursors, program
    assert [op for op in program if op[1] == "Column" and op[2] in table_cursors] == []


def assert_a_generic_plan_uses_it(container: Container) -> None:
    """PostgreSQL finds a test's failing commits through a partial index in a plan made for
    any values.

    As detection reads a test's failing commits, prepared the way psycopg prepares a
    statement run often.
    """
    query = select(tables.TestCommitRow.commit_sha).where(
        tables.TestCommitRow.repository_id == "r",
        tables.TestCommitRow.test_case_id == TEST,
        tables.TestCommitRow.last_run_at >= T0 - timedelta(days=7),
        FAILED_ON_COMMIT,
    )
    compiled = query.compile(dialect=postgresql.dialect())  # type: ignore[no-untyped-call]
    names: list[str] = []

    def numbered(match: re.Match[str]) -> str:
        names.append(match[1])
        return f"${len(names)}"

    sql = re.sub(r"%\((\w+)\)s", numbered, str(compiled))
    values = ", ".join(f"'{compiled.params[name]}'" for name in names)  # the test's own values
    with container.engine.connect() as connection:
        connection.execute(text("SET LOCAL plan_cache_mode = force_generic_plan"))
        connection.exec_driver_sql(f"PREPARE failing_commits AS {sql}")
        plan = connection.exec_driver_sql(f"EXPLAIN EXECUTE failing_commits({values})").all()
        connection.exec_driver_sql("DEALLOCATE failing_commits")
    # Either index of failing rows (on an empty table the planner may take the commit's): the
    # point is that a plan made for any values can use them at all, not only the key.
    partial = ("ix_test_commit_rollups_failing_test", "ix_test_commit_rollups_failed")
    assert any(name in row[0] for row in plan for name in partial), plan
