"""The flaky-test read API's queries: listings, figures from the rollups, status history."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, func, select
from sqlalchemy.orm import Session

from keepgreen.adapters.db.flaky_rows import (
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
    TestFailureRow,
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

    def _failing(
        self, repository_id: RepositoryId, start: datetime, end: datetime
    ) -> ColumnElement[bool]:
        # Through ix_test_results_failed_at: every stored result is a failed attempt now, and
        # the index holds the test too, so the rows themselves are not read.
        return and_(
            TestResultRow.repository_id == repository_id,
            TestResultRow.outcome == "failed",
            TestResultRow.at >= start,
            TestResultRow.at < end,
        )

    def count_failing(self, repository_id: RepositoryId, start: datetime, end: datetime) -> int:
        return self._count(
            select(func.count(func.distinct(TestResultRow.test_case_id))).where(
                self._failing(repository_id, start, end)
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
        failures = func.count().label("failures")
        rows = self._session.execute(
            select(TestResultRow.test_case_id, failures, func.count().over().label("total"))
            .where(self._failing(repository_id, start, end))
            .group_by(TestResultRow.test_case_id)
            .order_by(failures.desc(), TestResultRow.test_case_id)
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
                    TestCommitRow.failures > 0,
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
        found: dict[str, list[FailureCount]] = defaultdict(list)
        for chunk in chunks(ids):
            query = (
                select(
                    TestFailureRow.test_case_id,
                    TestFailureRow.summary_key,
                    func.max(TestFailureRow.summary),
                    func.sum(TestFailureRow.occurrences),
                    func.max(TestFailureRow.last_at),
                )
                .where(
                    TestFailureRow.repository_id == repository_id,
                    TestFailureRow.day >= day_of(since),
                )
                .group_by(TestFailureRow.test_case_id, TestFailureRow.summary_key)
            )
            rows = self._session.execute(
                of_tests(self._session, query, TestFailureRow.test_case_id, chunk)
            )
            for test_id, _key, summary, occurrences, last_at in rows:
                found[test_id].append(FailureCount(str(summary), int(occurrences), last_at))
        return found
