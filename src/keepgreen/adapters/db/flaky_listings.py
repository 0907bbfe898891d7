"""The flaky-test read API's queries: listings, figures from the rollups, status history."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Select, Subquery, and_, func, not_, select, union_all
from sqlalchemy.orm import Session

from keepgreen.adapters.db.flaky_rows import (
    FAILED_ON_COMMIT,
    TEST_CASES,
    chunks,
    day_of,
    hour_of,
    load_tests,
    of_tests,
    quarantined,
    test_case_of,
)
from keepgreen.adapters.db.tables import (
    TestCaseRow,
    TestCommitRow,
    TestDayTotalRow,
    TestFailureDayRow,
    TestFailureTemplateRow,
    TestHourTotalRow,
    TestResultRow,
    TestStatusChangeRow,
)
from keepgreen.app.flaky.settings import FlakySettings
from keepgreen.app.flaky.store import FailureRates
from keepgreen.core.flaky.failures import FailureCount
from keepgreen.core.flaky.model import StatusChange, TestCase
from keepgreen.core.flaky.monitors import TestStatus
from keepgreen.core.ids import RepositoryId


class SqlFlakyListings:
    def __init__(self, session: Session) -> None:
        self._session = session

    def status_history(self, repository_id: RepositoryId, test_id: str) -> Sequence[StatusChange]:
        rows = self._session.scalars(
            select(TestStatusChangeRow)
            .where(
                TestStatusChangeRow.repository_id == repository_id,
                TestStatusChangeRow.test_case_id == test_id,
            )
            .order_by(TestStatusChangeRow.at, TestStatusChangeRow.id)
        )
        return [
            StatusChange(row.test_case_id, row.at, TestStatus(row.status), row.reason)
            for row in rows
        ]

    # --- listings -------------------------------------------------------------------------

    def _by_status(self, repository_id: RepositoryId, status: TestStatus) -> ColumnElement[bool]:
        return and_(TestCaseRow.repository_id == repository_id, TestCaseRow.status == status.value)

    def count_by_status(self, repository_id: RepositoryId, status: TestStatus) -> int:
        return self._count(select(func.count()).where(self._by_status(repository_id, status)))

    def page_by_status(
        self, repository_id: RepositoryId, status: TestStatus, *, offset: int, limit: int
    ) -> Sequence[TestCase]:
        rows = self._session.execute(
            select(TEST_CASES)
            .where(self._by_status(repository_id, status))
            .order_by(TestCaseRow.status_at.desc(), TestCaseRow.id)
            .offset(offset)
            .limit(limit)
        )
        return [test_case_of(row) for row in rows]

    def _failing(self, repository_id: RepositoryId, start: datetime, end: datetime) -> Subquery:
        """(test, failed attempts) rows whose sums per test are the test's failed attempts in
        [start, end).

        A test's day that lies wholly in the window (its first and last failure of the day in
        it) is counted from test_failure_days; only the days at the window's ends can be cut,
        and a test's cut day is counted from its raw results.
        """
        days, results = TestFailureDayRow, TestResultRow
        whole = and_(days.first_at >= start, days.last_at < end)
        parts = [
            select(days.test_case_id, days.failures).where(
                days.repository_id == repository_id,
                days.day >= day_of(start),
                days.day < end,
                whole,
            )
        ]
        for edge in sorted({day_of(start), day_of(end)}):
            if edge >= end:
                continue
            # Counted per cut test (a subquery, so that no plan walks the raw results of the
            # whole day first), through ix_test_results_test_case_at alone: every stored result
            # is a failed attempt. A test that failed only outside the window counts 0.
            in_window = (
                select(func.count())
                .where(
                    results.repository_id == repository_id,
                    results.test_case_id == days.test_case_id,
                    results.at >= max(start, edge),
                    results.at < min(end, edge + timedelta(days=1)),
                )
                .scalar_subquery()
            )
            parts.append(
                select(days.test_case_id, in_window).where(
                    days.repository_id == repository_id, days.day == edge, not_(whole)
                )
            )
        return union_all(*parts).subquery("failing")

    def count_failing(self, repository_id: RepositoryId, start: datetime, end: datetime) -> int:
        failing = self._failing(repository_id, start, end)
        tests = select(failing.c.test_case_id).group_by(failing.c.test_case_id)
        return self._count(
            select(func.count()).select_from(
                tests.having(func.sum(failing.c.failures) > 0).subquery()
            )
        )

    def page_failing(
        self,
        repository_id: RepositoryId,
        start: datetime,
        end: datetime,
        *,
        offset: int,
        limit: int,
    ) -> tuple[Sequence[TestCase], int]:
        # One pass: the page and the count of every failing test come from the same grouping.
        failing = self._failing(repository_id, start, end)
        failures = func.sum(failing.c.failures).label("failures")
        rows = self._session.execute(
            select(failing.c.test_case_id, failures, func.count().over().label("total"))
            .group_by(failing.c.test_case_id)
            .having(failures > 0)
            .order_by(failures.desc(), failing.c.test_case_id)
            .offset(offset)
            .limit(limit)
        ).all()
        if not rows:
            # Past the last page (or nothing failed): the count alone says how many there are.
            return [], (self.count_failing(repository_id, start, end) if offset else 0)
        ids = [row.test_case_id for row in rows]
        found = load_tests(self._session, repository_id, ids)
        return [found[test_id] for test_id in ids if test_id in found], int(rows[0].total)

    def count_quarantined(self, repository_id: RepositoryId, settings: FlakySettings) -> int:
        return self._count(select(func.count()).where(quarantined(repository_id, settings)))

    def page_quarantined(
        self, repository_id: RepositoryId, settings: FlakySettings, *, offset: int, limit: int
    ) -> Sequence[TestCase]:
        rows = self._session.execute(
            select(TEST_CASES)
            .where(quarantined(repository_id, settings))
            .order_by(TestCaseRow.name, TestCaseRow.id)
            .offset(offset)
            .limit(limit)
        )
        return [test_case_of(row) for row in rows]

    def _count(self, query: Select[Any]) -> int:
        return int(self._session.scalar(query) or 0)

    # --- figures for the read API ---------------------------------------------------------

    def failure_rates(
        self, repository_id: RepositoryId, ids: Collection[str], *, now: datetime
    ) -> Mapping[str, FailureRates]:
        # Probed, not scanned: the totals are keyed by time first (cheap to write), so each
        # test's 8 days and 25 hours are looked up one by one.
        first_day = day_of(now - timedelta(days=7))
        days = [first_day + timedelta(days=n) for n in range((day_of(now) - first_day).days + 1)]
        first_hour = hour_of(now - timedelta(hours=24))
        hours = [first_hour + timedelta(hours=n) for n in range(25)]
        week = self._totals(TestDayTotalRow, TestDayTotalRow.day, days, repository_id, ids)
        today = self._totals(TestHourTotalRow, TestHourTotalRow.hour, hours, repository_id, ids)
        return {
            test_id: FailureRates(*week.get(test_id, (0, 0)), *today.get(test_id, (0, 0)))
            for test_id in week.keys() | today.keys()
        }

    def daily_totals(
        self, repository_id: RepositoryId, test_id: str, days: Sequence[datetime]
    ) -> Mapping[datetime, tuple[int, int]]:
        query = select(TestDayTotalRow.day, TestDayTotalRow.runs, TestDayTotalRow.failures).where(
            TestDayTotalRow.repository_id == repository_id,
            TestDayTotalRow.day.in_(days),
            TestDayTotalRow.test_case_id == test_id,
        )
        return {day: (runs, failures) for day, runs, failures in self._session.execute(query)}

    def _totals(
        self,
        table: type[TestDayTotalRow | TestHourTotalRow],
        bucket: Any,
        buckets: Sequence[datetime],
        repository_id: RepositoryId,
        ids: Collection[str],
    ) -> dict[str, tuple[int, int]]:
        found: dict[str, tuple[int, int]] = {}
        for chunk in chunks(ids):
            query = select(table.test_case_id, table.runs, table.failures).where(
                table.repository_id == repository_id
            )
            query = of_tests(self._session, query, table.test_case_id, chunk, at=(bucket, buckets))
            for test_id, runs, failures in self._session.execute(query):
                before = found.get(test_id, (0, 0))
                found[test_id] = (before[0] + runs, before[1] + failures)
        return found

    def pull_requests_impacted(
        self, repository_id: RepositoryId, ids: Collection[str], since: datetime
    ) -> Mapping[str, int]:
        found: dict[str, int] = {}
        for chunk in chunks(ids):
            query = (
                select(
                    TestCommitRow.test_case_id, func.count(func.distinct(TestCommitRow.pr_number))
                )
                .where(
                    TestCommitRow.repository_id == repository_id,
                    TestCommitRow.pr_number.is_not(None),
                    # Said, though last_failure_at implies it: the test's failing rows are then
                    # read through ix_test_commit_rollups_failing_test, a partial index.
                    FAILED_ON_COMMIT,
                    TestCommitRow.last_failure_at >= since,
                )
                .group_by(TestCommitRow.test_case_id)
            )
            rows = self._session.execute(
                of_tests(self._session, query, TestCommitRow.test_case_id, chunk)
            )
            for test_id, count in rows:
                found[test_id] = int(count)
        return found

    def failure_counts(
        self, repository_id: RepositoryId, ids: Collection[str], since: datetime
    ) -> Mapping[str, list[FailureCount]]:
        """Each test's failure templates of the days since `since`, one per template and day
        (a listing mines them together).
        """
        found: dict[str, list[FailureCount]] = defaultdict(list)
        templates = TestFailureTemplateRow
        for chunk in chunks(ids):
            query = select(
                templates.test_case_id, templates.summary, templates.occurrences, templates.last_at
            ).where(templates.repository_id == repository_id, templates.day >= day_of(since))
            rows = self._session.execute(
                of_tests(self._session, query, templates.test_case_id, chunk)
            )
            for test_id, summary, occurrences, last_at in rows:
                found[test_id].append(FailureCount(summary, occurrences, last_at))
        return found
