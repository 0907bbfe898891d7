"""The flaky-test store on SQL: test cases, raw results, rollups, status history."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import (
    ColumnElement,
    Select,
    Table,
    and_,
    bindparam,
    case,
    delete,
    false,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from keepgreen.adapters.db.tables import (
    FlakySettingsRow,
    InstanceSecretRow,
    TestCaseRow,
    TestCommitRow,
    TestFailureRow,
    TestHourRow,
    TestResultRow,
    TestStatusChangeRow,
    TestUploadRow,
)
from keepgreen.app.flaky.settings import FlakySettings, monitors_from_dict, monitors_to_dict
from keepgreen.app.flaky.store import (
    CommitDelta,
    FailureDelta,
    FailureRates,
    HourDelta,
    ResultRecord,
    SavedStatus,
    UploadRecord,
)
from keepgreen.core.flaky.failures import FailureCount
from keepgreen.core.flaky.model import StatusChange, TestCase
from keepgreen.core.flaky.monitors import (
    CommitRuns,
    HourBucket,
    ManualFlag,
    MonitorState,
    TestStatus,
)
from keepgreen.core.flaky.quarantine import QuarantineOverride, QuarantineSettings
from keepgreen.core.ids import RepositoryId

CHUNK = 500  # ids per IN (...) list: well under SQLite's and PostgreSQL's parameter limits
T = TypeVar("T")


def _chunks(items: Collection[T]) -> Iterator[list[T]]:
    ordered = list(items)
    for start in range(0, len(ordered), CHUNK):
        yield ordered[start : start + CHUNK]


def _state_to_json(state: MonitorState) -> dict[str, Any]:
    return {
        "active": state.active,
        "since": state.since.isoformat() if state.since else None,
        "reason": state.reason,
        "classification": state.classification.value,
    }


def _state_from_json(data: dict[str, Any]) -> MonitorState:
    since = data.get("since")
    return MonitorState(
        active=bool(data["active"]),
        since=datetime.fromisoformat(since) if since else None,
        reason=str(data["reason"]),
        classification=TestStatus(data["classification"]),
    )


def _test_case(row: TestCaseRow) -> TestCase:
    flag = (
        ManualFlag(row.manual_flag_reason or "", row.manual_flag_at)
        if row.manual_flag_at is not None
        else None
    )
    return TestCase(
        id=row.id,
        repository_id=RepositoryId(row.repository_id),
        name=row.name,
        classname=row.classname,
        parent=row.parent,
        file=row.file,
        variant=row.variant,
        status=TestStatus(row.status),
        status_reason=row.status_reason,
        status_at=row.status_at,
        first_seen_at=row.first_seen_at,
        last_seen_at=row.last_seen_at,
        monitors={key: _state_from_json(value) for key, value in (row.monitors or {}).items()},
        manual_flag=flag,
        quarantine_override=(
            QuarantineOverride(row.quarantine_override) if row.quarantine_override else None
        ),
        quarantine_override_at=row.quarantine_override_at,
        ticket=row.ticket,
        codeowners=tuple(row.codeowners or ()),
    )


class SqlFlakyStore:
    def __init__(self, session: Session) -> None:
        self._session = session

    def _upsert(
        self,
        table: Any,
        rows: list[dict[str, Any]],
        *,
        keys: list[str],
        add: Sequence[str],
        latest: Sequence[str],
        earliest: Sequence[str] = (),
    ) -> None:
        """INSERT ... ON CONFLICT DO UPDATE adding `add` columns and keeping the latest/earliest
        of the timestamp columns; one cached statement executed for many rows (keys unique
        within `rows`).
        """
        if not rows:
            return
        dialect = self._session.get_bind().dialect.name
        insert = postgresql_insert if dialect == "postgresql" else sqlite_insert
        statement = insert(table)
        new = statement.excluded
        changes: dict[str, Any] = {name: table.c[name] + new[name] for name in add}
        for name in latest:
            changes[name] = func.coalesce(
                _greatest(table.c[name], new[name], dialect), table.c[name], new[name]
            )
        for name in earliest:
            changes[name] = func.coalesce(table.c[name], new[name])
        self._session.execute(
            statement.on_conflict_do_update(index_elements=keys, set_=changes), rows
        )

    # --- settings -------------------------------------------------------------------------

    def settings(self, repository_id: RepositoryId) -> FlakySettings:
        row = self._session.get(FlakySettingsRow, repository_id)
        if row is None:
            return FlakySettings()
        return FlakySettings(
            monitors=monitors_from_dict(row.monitors),
            quarantine=QuarantineSettings(row.quarantine_enabled, row.auto_quarantine_flaky),
            ticket_url_template=row.ticket_url_template,
        )

    def save_settings(
        self, repository_id: RepositoryId, settings: FlakySettings, *, at: datetime
    ) -> None:
        row = self._session.get(FlakySettingsRow, repository_id)
        if row is None:
            row = FlakySettingsRow(repository_id=repository_id)
            self._session.add(row)
        row.quarantine_enabled = settings.quarantine.enabled
        row.auto_quarantine_flaky = settings.quarantine.auto_quarantine_flaky
        row.ticket_url_template = settings.ticket_url_template
        row.monitors = monitors_to_dict(settings.monitors)
        row.updated_at = at
        self._session.flush()

    # --- ingest ---------------------------------------------------------------------------

    def add_upload(self, upload: UploadRecord) -> None:
        self._session.add(
            TestUploadRow(
                id=upload.id,
                repository_id=upload.repository_id,
                commit_sha=upload.commit_sha,
                branch=upload.branch,
                pr_number=upload.pr_number,
                job_url=upload.job_url,
                run_id=upload.run_id,
                variant=upload.variant,
                received_at=upload.received_at,
                files=upload.files,
                tests=upload.tests,
                results=upload.results,
                failed=upload.failed,
                skipped=upload.skipped,
                excluded=upload.excluded,
            )
        )
        self._session.flush()

    def ensure_tests(self, tests: Sequence[TestCase], *, seen_at: datetime) -> None:
        by_id = {test.id: test for test in tests}
        existing: dict[str, list[str]] = {}
        for chunk in _chunks(by_id):
            rows_found = self._session.execute(
                select(TestCaseRow.id, TestCaseRow.codeowners).where(TestCaseRow.id.in_(chunk))
            )
            existing.update((test_id, owners or []) for test_id, owners in rows_found)
        rows: list[dict[str, Any]] = [
            {
                "id": test.id,
                "repository_id": test.repository_id,
                "name": test.name,
                "classname": test.classname,
                "parent": test.parent,
                "file": test.file,
                "variant": test.variant,
                "status": test.status.value,
                "status_reason": test.status_reason,
                "status_at": test.status_at,
                "monitors": {},
                "codeowners": list(test.codeowners),
                "first_seen_at": seen_at,
                "last_seen_at": seen_at,
            }
            for test in by_id.values()
            if test.id not in existing
        ]
        if rows:
            dialect = self._session.get_bind().dialect.name
            insert = postgresql_insert if dialect == "postgresql" else sqlite_insert
            # A concurrent upload may insert the same new test: its row is as good as ours.
            self._session.execute(insert(_table(TestCaseRow)).on_conflict_do_nothing(), rows)
        seen = [test_id for test_id in by_id if test_id in existing]
        for chunk in _chunks(seen):
            self._session.execute(
                update(TestCaseRow).where(TestCaseRow.id.in_(chunk)).values(last_seen_at=seen_at)
            )
        owned: dict[tuple[str, ...], list[str]] = defaultdict(list)
        for test_id in seen:
            owners = by_id[test_id].codeowners
            if owners and list(owners) != existing[test_id]:
                owned[owners].append(test_id)
        for owners, ids in owned.items():
            for chunk in _chunks(ids):
                self._session.execute(
                    update(TestCaseRow)
                    .where(TestCaseRow.id.in_(chunk))
                    .values(codeowners=list(owners))
                )

    def add_results(self, upload: UploadRecord, results: Sequence[ResultRecord]) -> None:
        insert_results = insert(_table(TestResultRow))
        rows = [
            {
                "test_case_id": result.test_case_id,
                "upload_id": upload.id,
                "repository_id": upload.repository_id,
                "at": upload.received_at,
                "outcome": result.outcome,
                "attempt": result.attempt,
                "duration_ms": result.duration_ms,
                "summary": result.summary,
            }
            for result in results
        ]
        if rows:
            self._session.execute(insert_results, rows)

    def add_to_rollups(
        self,
        hours: Sequence[HourDelta],
        commits: Sequence[CommitDelta],
        failures: Sequence[FailureDelta],
    ) -> None:
        self._upsert(
            TestHourRow.__table__,
            [
                {
                    "test_case_id": delta.test_case_id,
                    "hour": delta.hour,
                    "branch": delta.branch,
                    "runs": delta.runs,
                    "failures": delta.failures,
                    "last_run_at": delta.at,
                    "last_failure_at": delta.at if delta.failures else None,
                }
                for delta in hours
            ],
            keys=["test_case_id", "hour", "branch"],
            add=["runs", "failures"],
            latest=["last_run_at", "last_failure_at"],
        )
        self._upsert(
            TestCommitRow.__table__,
            [
                {
                    "test_case_id": delta.test_case_id,
                    "commit_sha": delta.commit_sha,
                    "branch": delta.branch,
                    "pr_number": delta.pr_number,
                    "passes": delta.passes,
                    "failures": delta.failures,
                    "first_pass_at": delta.at if delta.passes else None,
                    "first_failure_at": delta.at if delta.failures else None,
                    "last_failure_at": delta.at if delta.failures else None,
                    "last_run_at": delta.at,
                }
                for delta in commits
            ],
            keys=["test_case_id", "commit_sha"],
            add=["passes", "failures"],
            latest=["last_failure_at", "last_run_at"],
            earliest=["first_pass_at", "first_failure_at"],
        )
        self._upsert(
            TestFailureRow.__table__,
            [
                {
                    "test_case_id": delta.test_case_id,
                    "day": delta.day,
                    "summary_key": delta.summary_key,
                    "summary": delta.summary,
                    "occurrences": delta.occurrences,
                    "last_at": delta.at,
                }
                for delta in failures
            ],
            keys=["test_case_id", "day", "summary_key"],
            add=["occurrences"],
            latest=["last_at"],
        )

    # --- reads for detection --------------------------------------------------------------

    def tests(self, ids: Collection[str]) -> Mapping[str, TestCase]:
        found: dict[str, TestCase] = {}
        for chunk in _chunks(ids):
            for row in self._session.scalars(select(TestCaseRow).where(TestCaseRow.id.in_(chunk))):
                found[row.id] = _test_case(row)
        return found

    def test(self, repository_id: RepositoryId, test_id: str) -> TestCase | None:
        row = self._session.get(TestCaseRow, test_id)
        if row is None or row.repository_id != repository_id:
            return None
        return _test_case(row)

    def mixed_on_commit(self, ids: Collection[str], commit_sha: str) -> set[str]:
        mixed: set[str] = set()
        for chunk in _chunks(ids):
            mixed.update(
                self._session.scalars(
                    select(TestCommitRow.test_case_id).where(
                        TestCommitRow.test_case_id.in_(chunk),
                        TestCommitRow.commit_sha == commit_sha,
                        TestCommitRow.passes > 0,
                        TestCommitRow.failures > 0,
                    )
                )
            )
        return mixed

    def buckets(self, ids: Collection[str], since: datetime) -> Mapping[str, list[HourBucket]]:
        found: dict[str, list[HourBucket]] = defaultdict(list)
        hours = TestHourRow.__table__.c
        for chunk in _chunks(ids):
            rows = self._session.execute(
                select(
                    hours.test_case_id,
                    hours.hour,
                    hours.branch,
                    hours.runs,
                    hours.failures,
                    hours.last_run_at,
                    hours.last_failure_at,
                ).where(hours.test_case_id.in_(chunk), hours.hour >= since)
            )
            for test_id, *values in rows:
                found[test_id].append(HourBucket(*values))
        return found

    def commits(self, ids: Collection[str], since: datetime) -> Mapping[str, list[CommitRuns]]:
        found: dict[str, list[CommitRuns]] = defaultdict(list)
        commits = TestCommitRow.__table__.c
        for chunk in _chunks(ids):
            rows = self._session.execute(
                select(
                    commits.test_case_id,
                    commits.commit_sha,
                    commits.branch,
                    commits.pr_number,
                    commits.passes,
                    commits.failures,
                    commits.first_pass_at,
                    commits.first_failure_at,
                    commits.last_run_at,
                ).where(commits.test_case_id.in_(chunk), commits.last_run_at >= since)
            )
            for test_id, *values in rows:
                found[test_id].append(CommitRuns(*values))
        return found

    # --- status and per-test settings -----------------------------------------------------

    def save_statuses(self, statuses: Sequence[SavedStatus]) -> None:
        if not statuses:
            return
        table = _table(TestCaseRow)
        statement = (
            update(table)
            .where(table.c.id == bindparam("test_id"))
            .values(
                status=bindparam("new_status"),
                status_reason=bindparam("new_reason"),
                status_at=bindparam("new_status_at"),
                monitors=bindparam("new_monitors"),
            )
        )
        self._session.execute(
            statement,
            [
                {
                    "test_id": saved.test_id,
                    "new_status": saved.status.value,
                    "new_reason": saved.reason,
                    "new_status_at": saved.status_at,
                    "new_monitors": {
                        key: _state_to_json(state) for key, state in saved.monitors.items()
                    },
                }
                for saved in statuses
            ],
        )

    def add_status_change(self, change: StatusChange) -> None:
        self._session.add(
            TestStatusChangeRow(
                test_case_id=change.test_case_id,
                at=change.at,
                status=change.status.value,
                reason=change.reason,
            )
        )

    def status_history(self, test_id: str) -> Sequence[StatusChange]:
        rows = self._session.scalars(
            select(TestStatusChangeRow)
            .where(TestStatusChangeRow.test_case_id == test_id)
            .order_by(TestStatusChangeRow.at, TestStatusChangeRow.id)
        )
        return [
            StatusChange(row.test_case_id, row.at, TestStatus(row.status), row.reason)
            for row in rows
        ]

    def set_manual_flag(self, test_id: str, flag: ManualFlag | None) -> None:
        self._session.execute(
            update(TestCaseRow)
            .where(TestCaseRow.id == test_id)
            .values(
                manual_flag_reason=flag.reason if flag else None,
                manual_flag_at=flag.at if flag else None,
            )
        )

    def set_override(
        self, test_id: str, override: QuarantineOverride | None, *, at: datetime
    ) -> None:
        self._session.execute(
            update(TestCaseRow)
            .where(TestCaseRow.id == test_id)
            .values(
                quarantine_override=override.value if override else None,
                quarantine_override_at=at if override else None,
            )
        )

    def set_ticket(self, test_id: str, ticket: str) -> None:
        self._session.execute(
            update(TestCaseRow).where(TestCaseRow.id == test_id).values(ticket=ticket)
        )

    # --- listings -------------------------------------------------------------------------

    def unhealthy_ids(self, repository_id: RepositoryId | None = None) -> Sequence[str]:
        query = select(TestCaseRow.id).where(TestCaseRow.status != TestStatus.HEALTHY.value)
        if repository_id is not None:
            query = query.where(TestCaseRow.repository_id == repository_id)
        return list(self._session.scalars(query))

    def _by_status(self, repository_id: RepositoryId, status: TestStatus) -> ColumnElement[bool]:
        return and_(TestCaseRow.repository_id == repository_id, TestCaseRow.status == status.value)

    def count_by_status(self, repository_id: RepositoryId, status: TestStatus) -> int:
        return self._count(select(func.count()).where(self._by_status(repository_id, status)))

    def page_by_status(
        self, repository_id: RepositoryId, status: TestStatus, *, offset: int, limit: int
    ) -> Sequence[TestCase]:
        rows = self._session.scalars(
            select(TestCaseRow)
            .where(self._by_status(repository_id, status))
            .order_by(TestCaseRow.status_at.desc(), TestCaseRow.id)
            .offset(offset)
            .limit(limit)
        )
        return [_test_case(row) for row in rows]

    def _failing(
        self, repository_id: RepositoryId, start: datetime, end: datetime
    ) -> ColumnElement[bool]:
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
    ) -> Sequence[TestCase]:
        failures = func.count().label("failures")
        ids = list(
            self._session.execute(
                select(TestResultRow.test_case_id, failures)
                .where(self._failing(repository_id, start, end))
                .group_by(TestResultRow.test_case_id)
                .order_by(failures.desc(), TestResultRow.test_case_id)
                .offset(offset)
                .limit(limit)
            ).scalars()
        )
        found = self.tests(ids)
        return [found[test_id] for test_id in ids if test_id in found]

    def _quarantined(
        self, repository_id: RepositoryId, settings: FlakySettings
    ) -> ColumnElement[bool]:
        always = TestCaseRow.quarantine_override == QuarantineOverride.ALWAYS.value
        if not settings.quarantine.enabled:
            return false()
        rule = always
        if settings.quarantine.auto_quarantine_flaky:
            automatic = and_(
                TestCaseRow.status == TestStatus.FLAKY.value,
                or_(
                    TestCaseRow.quarantine_override.is_(None),
                    TestCaseRow.quarantine_override != QuarantineOverride.NEVER.value,
                ),
            )
            rule = or_(always, automatic)
        return and_(TestCaseRow.repository_id == repository_id, rule)

    def count_quarantined(self, repository_id: RepositoryId, settings: FlakySettings) -> int:
        return self._count(select(func.count()).where(self._quarantined(repository_id, settings)))

    def page_quarantined(
        self, repository_id: RepositoryId, settings: FlakySettings, *, offset: int, limit: int
    ) -> Sequence[TestCase]:
        rows = self._session.scalars(
            select(TestCaseRow)
            .where(self._quarantined(repository_id, settings))
            .order_by(TestCaseRow.name, TestCaseRow.id)
            .offset(offset)
            .limit(limit)
        )
        return [_test_case(row) for row in rows]

    def quarantined_ids(
        self, repository_id: RepositoryId, settings: FlakySettings, ids: Collection[str]
    ) -> set[str]:
        found: set[str] = set()
        for chunk in _chunks(ids):
            found.update(
                self._session.scalars(
                    select(TestCaseRow.id).where(
                        self._quarantined(repository_id, settings), TestCaseRow.id.in_(chunk)
                    )
                )
            )
        return found

    def _count(self, query: Select[Any]) -> int:
        return int(self._session.scalar(query) or 0)

    # --- figures for the read API ---------------------------------------------------------

    def failure_rates(self, ids: Collection[str], *, now: datetime) -> Mapping[str, FailureRates]:
        week = _hour_of(now - timedelta(days=7))
        day = _hour_of(now - timedelta(hours=24))
        found: dict[str, FailureRates] = {}
        for chunk in _chunks(ids):
            recent = TestHourRow.hour >= day
            rows = self._session.execute(
                select(
                    TestHourRow.test_case_id,
                    func.sum(TestHourRow.runs),
                    func.sum(TestHourRow.failures),
                    func.sum(_when(recent, TestHourRow.runs)),
                    func.sum(_when(recent, TestHourRow.failures)),
                )
                .where(TestHourRow.test_case_id.in_(chunk), TestHourRow.hour >= week)
                .group_by(TestHourRow.test_case_id)
            )
            for test_id, runs_7d, failures_7d, runs_24h, failures_24h in rows:
                found[test_id] = FailureRates(
                    int(runs_7d or 0),
                    int(failures_7d or 0),
                    int(runs_24h or 0),
                    int(failures_24h or 0),
                )
        return found

    def pull_requests_impacted(self, ids: Collection[str], since: datetime) -> Mapping[str, int]:
        found: dict[str, int] = {}
        for chunk in _chunks(ids):
            rows = self._session.execute(
                select(
                    TestCommitRow.test_case_id, func.count(func.distinct(TestCommitRow.pr_number))
                )
                .where(
                    TestCommitRow.test_case_id.in_(chunk),
                    TestCommitRow.pr_number.is_not(None),
                    TestCommitRow.failures > 0,
                    TestCommitRow.last_failure_at >= since,
                )
                .group_by(TestCommitRow.test_case_id)
            )
            for test_id, count in rows:
                found[test_id] = int(count)
        return found

    def failure_counts(
        self, ids: Collection[str], since: datetime
    ) -> Mapping[str, list[FailureCount]]:
        found: dict[str, list[FailureCount]] = defaultdict(list)
        for chunk in _chunks(ids):
            rows = self._session.execute(
                select(
                    TestFailureRow.test_case_id,
                    TestFailureRow.summary_key,
                    func.max(TestFailureRow.summary),
                    func.sum(TestFailureRow.occurrences),
                    func.max(TestFailureRow.last_at),
                )
                .where(TestFailureRow.test_case_id.in_(chunk), TestFailureRow.day >= _day_of(since))
                .group_by(TestFailureRow.test_case_id, TestFailureRow.summary_key)
            )
            for test_id, _key, summary, occurrences, last_at in rows:
                found[test_id].append(FailureCount(str(summary), int(occurrences), last_at))
        return found

    # --- housekeeping ---------------------------------------------------------------------

    def purge(self, *, results_before: datetime, rollups_before: datetime) -> int:
        deleted = 0
        statements = [
            delete(TestResultRow).where(TestResultRow.at < results_before),
            delete(TestUploadRow).where(TestUploadRow.received_at < results_before),
            delete(TestHourRow).where(TestHourRow.hour < rollups_before),
            delete(TestFailureRow).where(TestFailureRow.day < rollups_before),
            delete(TestCommitRow).where(TestCommitRow.last_run_at < rollups_before),
        ]
        for statement in statements:
            deleted += int(getattr(self._session.execute(statement), "rowcount", 0) or 0)
        return deleted

    def secret(self, name: str, make: str) -> str:
        row = self._session.get(InstanceSecretRow, name)
        if row is not None:
            return row.value
        dialect = self._session.get_bind().dialect.name
        insert = postgresql_insert if dialect == "postgresql" else sqlite_insert
        # Two processes asking at once: the first insert wins and both read it back.
        self._session.execute(
            insert(InstanceSecretRow).values(name=name, value=make).on_conflict_do_nothing()
        )
        stored = self._session.get(InstanceSecretRow, name, populate_existing=True)
        if stored is None:
            raise RuntimeError(f"instance secret {name!r} vanished while being created")
        return stored.value


def _table(row: type[Any]) -> Table:
    table: Table = row.__table__
    return table


def _hour_of(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def _day_of(moment: datetime) -> datetime:
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


def _when(condition: ColumnElement[bool], value: Any) -> Any:
    return case((condition, value), else_=0)


def _greatest(left: Any, right: Any, dialect: str) -> Any:
    # PostgreSQL's greatest() and SQLite's two-argument max() both return NULL when an
    # argument is NULL; the caller's coalesce falls back to whichever is set.
    return func.greatest(left, right) if dialect == "postgresql" else func.max(left, right)
