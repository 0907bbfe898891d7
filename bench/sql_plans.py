"""The SQL keepgreen's flaky-test listings run, and how the database plans it.

The statements are caught as keepgreen sends them: this process builds keepgreen's container on
the served database (no migrations: the server ran them), listens to its engine's
`before_cursor_execute`, and calls the read service's listings, which run the listing adapter
(`SqlFlakyListings`). Each SELECT caught is then explained on the same database: EXPLAIN
ANALYZE on PostgreSQL (it runs the statement again), EXPLAIN QUERY PLAN on SQLite.
keepgreen's own modules are imported only there, so the rest of the benchmark, which uses only
keepgreen's public interfaces, runs whatever becomes of them.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, event

if TYPE_CHECKING:
    from keepgreen.core.model import RepoRef


@dataclass
class Statement:
    sql: str
    parameters: Any
    milliseconds: float = 0.0  # as keepgreen ran it
    plan: list[str] = field(default_factory=list)


@dataclass
class Capture:
    """The statements an engine runs while `recording` is on."""

    engine: Engine
    statements: list[Statement] = field(default_factory=list)
    recording: bool = False
    _started: float = 0.0

    def listen(self) -> None:
        event.listen(self.engine, "before_cursor_execute", self._before)
        event.listen(self.engine, "after_cursor_execute", self._after)

    def _before(
        self, _conn: Any, _cursor: Any, sql: str, params: Any, _ctx: Any, many: bool
    ) -> None:
        if self.recording and not many:
            self.statements.append(Statement(sql, params))
            self._started = time.perf_counter()

    def _after(
        self, _conn: Any, _cursor: Any, sql: str, _params: Any, _ctx: Any, many: bool
    ) -> None:
        if self.recording and not many and self.statements and self.statements[-1].sql == sql:
            self.statements[-1].milliseconds = (time.perf_counter() - self._started) * 1000


def explain(engine: Engine, statement: Statement) -> list[str]:
    """The database's plan of one caught statement, a line per step."""
    with engine.connect() as connection:
        if engine.dialect.name == "postgresql":
            rows = connection.exec_driver_sql(
                "EXPLAIN (ANALYZE, BUFFERS) " + statement.sql, statement.parameters
            )
            return [str(row[0]) for row in rows]
        rows = connection.exec_driver_sql(
            "EXPLAIN QUERY PLAN " + statement.sql, statement.parameters
        )
        depth: dict[int, int] = {0: 0}
        lines = []
        for node, parent, _unused, detail in rows:
            depth[node] = depth.get(parent, 0) + 1
            lines.append("  " * (depth[node] - 1) + str(detail))
        return lines


def listing_plans(
    *,
    database_url: str,
    scratch: Path,
    token: str,
    failing_repo: RepoRef,
    window: tuple[datetime, datetime],
    quarantined_repo: RepoRef,
) -> dict[str, list[Statement]]:
    """Every SELECT of a first page (100) of list-failing-tests over `window` and of
    list-quarantined-tests, with its plan.
    """
    from keepgreen.bootstrap import bootstrap
    from keepgreen.settings import Settings

    container = bootstrap(
        Settings(database_url=database_url, data_dir=scratch), run_migrations=False
    )
    try:
        org = container.admin.authenticate(token)
        if org is None:
            raise RuntimeError("the benchmark's token is not known to the database")
        capture = Capture(container.engine)
        capture.listen()
        calls = {
            "list-failing-tests": lambda: container.flaky.list_failing(
                org, failing_repo, start=window[0], end=window[1], size=100, token=""
            ),
            "list-quarantined-tests": lambda: container.flaky.list_quarantined(
                org, quarantined_repo, size=100, token=""
            ),
        }
        found: dict[str, list[Statement]] = {}
        for name, call in calls.items():
            call()  # once first: the page-token key and the caches are in place
            capture.statements = []
            capture.recording = True
            call()
            capture.recording = False
            selects = [s for s in capture.statements if s.sql.lstrip().upper().startswith("SELECT")]
            for statement in selects:
                statement.plan = explain(container.engine, statement)
            found[name] = selects
        return found
    finally:
        container.close()


# Four or more bound parameters in a row (an IN list): shown as their count.
PLACEHOLDERS = re.compile(r"(?:(?:\?|%\(\w+\)s), ){3,}(?:\?|%\(\w+\)s)")


def placeholders(found: re.Match[str]) -> str:
    return f"<{found.group(0).count(',') + 1} parameters>"


def print_plans(plans: dict[str, list[dict[str, Any]]], backend: str) -> None:
    how = "EXPLAIN (ANALYZE, BUFFERS)" if backend == "postgresql" else "EXPLAIN QUERY PLAN"
    for name, statements in plans.items():
        print(f"\n{how} of the SELECTs of {name} (first page of 100), as keepgreen runs them:")
        for number, statement in enumerate(statements, 1):
            print(f"\n-- {number}. {statement['milliseconds']:.1f} ms in keepgreen")
            print(PLACEHOLDERS.sub(placeholders, " ".join(statement["sql"].split())))
            print(f"-- parameters: {statement['parameters'][:300]}")
            for line in statement["plan"]:
                print(f"   {line}")
