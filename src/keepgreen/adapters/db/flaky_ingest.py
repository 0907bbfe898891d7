"""Storing one upload's tests set-based: staged in a temporary table, then a few statements.

A test's row per upload (its counts) is what the roll-ups add; building a statement parameter
per row in Python cost most of an upload's time. Here the rows are staged through the
driver's bulk path (PostgreSQL's COPY, SQLite's executemany) into a temporary table of the
connection, and each table is then written by one INSERT ... SELECT or UPDATE ... FROM that
binds the upload's own values (repository, hour, commit, times) once.

Rows of tables other uploads write too are taken in test id order, so two uploads that share
tests lock them in the same order and never deadlock each other on PostgreSQL; everything
else of a repository stays free, so the shards of one CI run are stored side by side.
"""

# ruff: noqa: S608 (the statements are built from this module's constants; values are bound)
from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import TextClause, bindparam, select, text
from sqlalchemy.orm import Session

from keepgreen.adapters.db.flaky_rows import chunks, of_tests
from keepgreen.adapters.db.tables import TestFailureTemplateRow
from keepgreen.adapters.db.types import UtcDateTime
from keepgreen.app.flaky.store import UploadRecord
from keepgreen.app.flaky.tally import TestTally, day_of, hour_of
from keepgreen.core.flaky.failures import FailureCount, FailureTemplate, absorb_failures
from keepgreen.core.flaky.monitors import NO_MONITOR_ACTIVE, TestStatus

# last_seen_at moves at most this often: rewriting every test's row on every upload would
# cost more than the rest of the upload, and no reading needs it finer.
LAST_SEEN_STEP = timedelta(hours=1)

_TESTS = "kg_upload_tests"
_FAILURES = "kg_upload_failures"
_TEST_COLUMNS = (
    "test_case_id",
    "name",
    "classname",
    "parent",
    "file",
    "owners",
    "runs",
    "passes",
    "failures",
    "hold",
)
_FAILURE_COLUMNS = ("test_case_id", "attempt", "duration_ms", "summary")

_STAGING = {
    _TESTS: (
        "test_case_id VARCHAR(36) NOT NULL, name TEXT NOT NULL, classname TEXT, parent TEXT,"
        " file TEXT, owners TEXT, runs INTEGER NOT NULL, passes INTEGER NOT NULL,"
        " failures INTEGER NOT NULL, hold INTEGER NOT NULL"
    ),
    _FAILURES: (
        "test_case_id VARCHAR(36) NOT NULL, attempt INTEGER NOT NULL, duration_ms INTEGER,"
        " summary TEXT"
    ),
}


# Which existing tests an upload rewrites: last seen over LAST_SEEN_STEP ago, or owned anew.
_STALE = "t.last_seen_at < :stale"
_OWNED = "(s.owners IS NOT NULL AND CAST(t.codeowners AS TEXT) <> s.owners)"


def _at(*names: str) -> list[Any]:
    return [bindparam(name, type_=UtcDateTime()) for name in names]


class UploadWriter:
    """Writes one claimed upload's tests within the session's transaction; `write` returns how
    many tests it added.
    """

    def __init__(self, session: Session) -> None:
        self._session = session
        self._postgresql = session.get_bind().dialect.name == "postgresql"

    def write(
        self,
        upload: UploadRecord,
        tests: Sequence[TestTally],
        codeowners: Mapping[str | None, tuple[str, ...]],
        *,
        roll_up: bool,
        by_branch: bool,
        hold: Collection[str],
    ) -> int:
        ordered = sorted(tests, key=lambda test: test.test_id)
        owners_json = {file: json.dumps(list(owners)) for file, owners in codeowners.items()}
        self._stage(
            _TESTS,
            _TEST_COLUMNS,
            (
                (
                    test.test_id,
                    test.name,
                    test.classname,
                    test.parent,
                    test.file,
                    owners_json.get(test.file),
                    test.runs,
                    test.passes,
                    test.failures,
                    int(test.test_id in hold),
                )
                for test in ordered
            ),
        )
        self._stage(
            _FAILURES,
            _FAILURE_COLUMNS,
            (
                (test.test_id, failed.attempt, failed.duration_ms, failed.summary)
                for test in ordered
                for failed in test.failed_attempts
            ),
        )
        values: dict[str, Any] = {
            "repository_id": upload.repository_id,
            "repository_key": upload.repository_id,
            "upload_id": upload.id,
            "now": upload.received_at,
            "stale": upload.received_at - LAST_SEEN_STEP,
            "variant": upload.variant,
            "healthy": TestStatus.HEALTHY.value,
            "reason": NO_MONITOR_ACTIVE,
            "hour": hour_of(upload.received_at),
            "day": day_of(upload.received_at),
            "branch": upload.branch,
            "commit_sha": upload.commit_sha,
            "pr_number": upload.pr_number,
        }
        execute = self._session.execute
        if self._postgresql:
            # Every statement below joins the whole staged upload with the tests: hash joins.
            # Planned by statistics that know nothing yet of a new repository's tests (nor
            # of the staging table), a nested loop over both took minutes for 50,000 tests.
            execute(text("SET LOCAL enable_nestloop = off"))
        # The tests' own rows first: the new ones inserted, then the existing ones this upload
        # writes or the caller evaluates taken, each sweep in id order; then the roll-ups.
        added = int(getattr(execute(self._new_tests(), values), "rowcount", 0) or 0)
        if self._postgresql:
            execute(self._hold(), values).all()
        execute(self._last_seen(), values)
        if codeowners:
            execute(self._owners_changed(), values)
        execute(_FAILED_RESULTS, values)
        execute(self._failure_days(), values)
        if roll_up:
            execute(self._totals("test_hour_totals", "hour"), values)
            execute(self._totals("test_day_totals", "day"), values)
            if by_branch:
                execute(self._hours(), values)
            execute(self._commits(), values)
        if self._postgresql:
            # The detection that follows reads row by row through the keys (of_tests), as
            # the failure templates below are.
            execute(text("RESET enable_nestloop"))
        else:
            # PostgreSQL empties them at commit; SQLite's would keep this upload's names in
            # the pooled connection (200,000 rows for a big one) until the next upload.
            for table in _STAGING:
                execute(text(f"DELETE FROM temp.{table}"))
        if roll_up:
            self._failure_templates(upload, [test for test in ordered if test.failures])
        return added

    # --- staging --------------------------------------------------------------------------

    def _stage(self, table: str, columns: Sequence[str], rows: Iterable[tuple[Any, ...]]) -> None:
        """Fills the connection's temporary `table` with `rows` (emptied first)."""
        connection = self._session.connection()
        driver = connection.connection.driver_connection
        if driver is None:
            raise RuntimeError("the session's connection is closed")
        cursor = driver.cursor()
        try:
            if self._postgresql:
                # Kept for the connection, emptied at each commit (and by a rollback).
                cursor.execute(
                    f"CREATE TEMPORARY TABLE IF NOT EXISTS {table} ({_STAGING[table]})"
                    " ON COMMIT DELETE ROWS"
                )
                cursor.execute(f"DELETE FROM {table}")
                with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(row)
            else:
                cursor.execute(f"CREATE TEMPORARY TABLE IF NOT EXISTS {table} ({_STAGING[table]})")
                cursor.execute(f"DELETE FROM temp.{table}")
                marks = ", ".join("?" * len(columns))
                cursor.executemany(
                    f"INSERT INTO temp.{table} ({', '.join(columns)}) VALUES ({marks})", rows
                )
        finally:
            cursor.close()

    # --- statements -----------------------------------------------------------------------

    def _json(self, expression: str) -> str:
        return f"CAST({expression} AS JSON)" if self._postgresql else expression

    def _new_tests(self) -> TextClause:
        # ON CONFLICT: a concurrent upload inserted the same new test; its row is as good.
        no_monitors, owners = self._json("'{}'"), self._json("COALESCE(s.owners, '[]')")
        return text(
            "INSERT INTO test_cases (repository_id, id, name, classname, parent, file, variant,"
            " status, status_reason, status_at, monitors, codeowners, first_seen_at,"
            " last_seen_at)"
            " SELECT :repository_id, s.test_case_id, s.name, s.classname, s.parent, s.file,"
            f" :variant, :healthy, :reason, :now, {no_monitors}, {owners}, :now, :now"
            # A parameter of its own: PostgreSQL types one used in the select list and in a
            # comparison inconsistently.
            f" FROM {_TESTS} s WHERE NOT EXISTS (SELECT 1 FROM test_cases t"
            " WHERE t.repository_id = :repository_key AND t.id = s.test_case_id)"
            " ORDER BY s.test_case_id ON CONFLICT DO NOTHING"
        ).bindparams(*_at("now"))

    def _hold(self) -> TextClause:
        return text(
            f"SELECT t.id FROM test_cases t JOIN {_TESTS} s ON t.id = s.test_case_id"
            f" WHERE t.repository_id = :repository_id AND (s.hold = 1 OR {_STALE} OR {_OWNED})"
            " ORDER BY t.id FOR UPDATE OF t"
        ).bindparams(*_at("stale"))

    def _update(self, assignments: str, condition: str) -> TextClause:
        """UPDATE test_cases SET `assignments` for the upload's tests matching `condition`
        (over `t`, the test's row, and `s`, its staged row): rows `_hold` already took.
        """
        return text(
            f"UPDATE test_cases SET {assignments} WHERE repository_id = :repository_id"
            f" AND id IN (SELECT t.id FROM test_cases t JOIN {_TESTS} s"
            f" ON t.id = s.test_case_id WHERE t.repository_id = :repository_id AND {condition})"
        )

    def _last_seen(self) -> TextClause:
        return self._update("last_seen_at = :now", _STALE).bindparams(*_at("now", "stale"))

    def _owners_changed(self) -> TextClause:
        # The owners of the test's file, when the upload knows them and they changed.
        staged = f"(SELECT s2.owners FROM {_TESTS} s2 WHERE s2.test_case_id = test_cases.id)"
        return self._update(f"codeowners = {self._json(staged)}", _OWNED)

    def _least(self, left: str, right: str) -> str:
        return self._extreme("LEAST" if self._postgresql else "MIN", left, right)

    def _greatest(self, left: str, right: str) -> str:
        return self._extreme("GREATEST" if self._postgresql else "MAX", left, right)

    def _extreme(self, pick: str, left: str, right: str) -> str:
        # Both are NULL when an argument is; coalesce falls back to whichever is set.
        return f"COALESCE({pick}({left}, {right}), {left}, {right})"

    def _totals(self, table: str, bucket: str) -> TextClause:
        return text(
            f"INSERT INTO {table} (repository_id, {bucket}, test_case_id, runs, failures)"
            f" SELECT :repository_id, :{bucket}, test_case_id, runs, failures"
            f" FROM {_TESTS} WHERE runs > 0 ORDER BY test_case_id"
            f" ON CONFLICT (repository_id, {bucket}, test_case_id) DO UPDATE SET"
            f" runs = {table}.runs + excluded.runs,"
            f" failures = {table}.failures + excluded.failures"
        ).bindparams(*_at(bucket))

    def _hours(self) -> TextClause:
        table = "test_hourly_rollups"
        return text(
            f"INSERT INTO {table} (repository_id, test_case_id, hour, branch, runs, failures,"
            " last_run_at, last_failure_at)"
            " SELECT :repository_id, test_case_id, :hour, :branch, runs, failures, :now,"
            " CASE WHEN failures > 0 THEN :now END"
            f" FROM {_TESTS} WHERE runs > 0 ORDER BY test_case_id"
            " ON CONFLICT (repository_id, test_case_id, hour, branch) DO UPDATE SET"
            f" runs = {table}.runs + excluded.runs,"
            f" failures = {table}.failures + excluded.failures,"
            f" last_run_at = {self._greatest(f'{table}.last_run_at', 'excluded.last_run_at')},"
            " last_failure_at ="
            f" {self._greatest(f'{table}.last_failure_at', 'excluded.last_failure_at')}"
        ).bindparams(*_at("hour", "now"))

    def _commits(self) -> TextClause:
        table = "test_commit_rollups"
        return text(
            f"INSERT INTO {table} (repository_id, test_case_id, commit_sha, branch, pr_number,"
            " passes, failures, first_pass_at, first_failure_at, last_failure_at, last_run_at,"
            " runs)"
            " SELECT :repository_id, test_case_id, :commit_sha, :branch, :pr_number, passes,"
            " failures, CASE WHEN passes > 0 THEN :now END,"
            " CASE WHEN failures > 0 THEN :now END, CASE WHEN failures > 0 THEN :now END,"
            " :now, 1"  # one upload ran it on this commit
            f" FROM {_TESTS} WHERE runs > 0 ORDER BY test_case_id"
            " ON CONFLICT (repository_id, test_case_id, commit_sha) DO UPDATE SET"
            f" passes = {table}.passes + excluded.passes,"
            f" failures = {table}.failures + excluded.failures,"
            f" runs = {table}.runs + excluded.runs,"
            f" first_pass_at = COALESCE({table}.first_pass_at, excluded.first_pass_at),"
            f" first_failure_at = COALESCE({table}.first_failure_at, excluded.first_failure_at),"
            " last_failure_at ="
            f" {self._greatest(f'{table}.last_failure_at', 'excluded.last_failure_at')},"
            f" last_run_at = {self._greatest(f'{table}.last_run_at', 'excluded.last_run_at')}"
        ).bindparams(*_at("now"))

    def _failure_days(self) -> TextClause:
        table = "test_failure_days"
        return text(
            f"INSERT INTO {table} (repository_id, day, test_case_id, failures, first_at, last_at)"
            f" SELECT :repository_id, :day, test_case_id, COUNT(*), :now, :now FROM {_FAILURES}"
            " GROUP BY test_case_id ORDER BY test_case_id"
            " ON CONFLICT (repository_id, day, test_case_id) DO UPDATE SET"
            f" failures = {table}.failures + excluded.failures,"
            f" first_at = {self._least(f'{table}.first_at', 'excluded.first_at')},"
            f" last_at = {self._greatest(f'{table}.last_at', 'excluded.last_at')}"
        ).bindparams(*_at("day", "now"))

    def _failure_templates(self, upload: UploadRecord, failing: Sequence[TestTally]) -> None:
        """Mines the upload's failures into each failing test's templates of the day, and
        writes the templates that changed.

        Read, mined and written while the transaction holds the tests' rows (on PostgreSQL;
        SQLite writes one transaction at a time), so two uploads failing the same test at
        once grow its templates one after the other.
        """
        if not failing:
            return
        day = day_of(upload.received_at)
        stored = self._stored_templates(upload.repository_id, day, [t.test_id for t in failing])
        rows = []
        for test in failing:
            before = stored.get(test.test_id, [])
            counts = [
                FailureCount(summary, occurrences, upload.received_at)
                for _key, summary, occurrences in test.summary_counts()
            ]
            after = absorb_failures(before, counts)
            rows += [
                {
                    "repository_id": upload.repository_id,
                    "test_case_id": test.test_id,
                    "day": day,
                    "position": position,
                    "summary": template.summary,
                    "occurrences": template.count,
                    "last_at": template.last_at,
                }
                for position, template in enumerate(after)
                if position >= len(before) or template != before[position]
            ]
        if not rows:
            return
        table = "test_failure_templates"
        statement = text(
            f"INSERT INTO {table} (repository_id, test_case_id, day, position, summary,"
            " occurrences, last_at) VALUES (:repository_id, :test_case_id, :day, :position,"
            " :summary, :occurrences, :last_at)"
            " ON CONFLICT (repository_id, test_case_id, day, position) DO UPDATE SET"
            " summary = excluded.summary, occurrences = excluded.occurrences,"
            " last_at = excluded.last_at"
        ).bindparams(*_at("day", "last_at"))
        self._session.execute(statement, rows)

    def _stored_templates(
        self, repository_id: str, day: datetime, ids: list[str]
    ) -> dict[str, list[FailureTemplate]]:
        found: dict[str, list[FailureTemplate]] = defaultdict(list)
        templates = TestFailureTemplateRow
        for chunk in chunks(ids):
            query = select(
                templates.test_case_id,
                templates.position,
                templates.summary,
                templates.occurrences,
                templates.last_at,
            ).where(templates.repository_id == repository_id)
            query = of_tests(
                self._session, query, templates.test_case_id, chunk, at=(templates.day, [day])
            )
            for test_id, _position, summary, occurrences, last_at in sorted(
                self._session.execute(query), key=lambda row: (row[0], row[1])
            ):
                found[test_id].append(FailureTemplate(summary, occurrences, last_at))
        return found


# Only failed attempts are kept one by one: the listings and the merge queue read those; a
# pass or a skip is counted in the roll-ups.
_FAILED_RESULTS = text(
    "INSERT INTO test_results (repository_id, test_case_id, upload_id, at, outcome, attempt,"
    " duration_ms, summary)"
    f" SELECT :repository_id, test_case_id, :upload_id, :now, 'failed', attempt, duration_ms,"
    f" summary FROM {_FAILURES}"
).bindparams(*_at("now"))
