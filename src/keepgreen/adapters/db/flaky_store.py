"""The flaky-test store on SQL: test cases, raw results, rollups, status history."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime

from sqlalchemy import (
    ColumnElement,
    and_,
    bindparam,
    delete,
    false,
    func,
    or_,
    select,
    text,
    tuple_,
    update,
)
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import URL
from sqlalchemy.orm import Session

from keepgreen.adapters.db.flaky_ingest import UploadWriter
from keepgreen.adapters.db.flaky_rows import (
    FAILED_ON_COMMIT,
    chunks,
    hour_of,
    load_tests,
    of_tests,
    quarantined,
    state_to_json,
    table_of,
    test_case_of,
    upload_of,
)
from keepgreen.adapters.db.tables import (
    FlakySettingsRow,
    InstanceSecretRow,
    TestCaseRow,
    TestCommitRow,
    TestDayTotalRow,
    TestFailureDayRow,
    TestFailureTemplateRow,
    TestHourRow,
    TestHourTotalRow,
    TestResultRow,
    TestStatusChangeRow,
    TestUploadRow,
)
from keepgreen.app.flaky.settings import FlakySettings, monitors_from_dict, monitors_to_dict
from keepgreen.app.flaky.store import CommitSeen, FailedOnCommit, SavedStatus, UploadRecord
from keepgreen.app.flaky.tally import TestTally
from keepgreen.core.flaky.model import StatusChange, TestCase
from keepgreen.core.flaky.monitors import (
    CommitRuns,
    HourBucket,
    ManualFlag,
    TestStatus,
)
from keepgreen.core.flaky.quarantine import QuarantineOverride, QuarantineSettings
from keepgreen.core.flaky.results import Outcome
from keepgreen.core.ids import RepositoryId

# The statuses of tests a monitor holds: probed one by one through (repository, status), where
# `status != 'healthy'` read every test of the repository.
UNHEALTHY = tuple(status.value for status in TestStatus if status is not TestStatus.HEALTHY)

# New tests an upload adds at least, for the statistics of the tests to be refreshed after it.
STATISTICS_AFTER_NEW_TESTS = 1_000


# And at most this often per database and process: the shards of a run each add a few thousand
# tests, and one ANALYZE after another (each waits for the last) cost more than they gave.
STATISTICS_EVERY_SECONDS = 60.0
_statistics_lock = threading.Lock()
_statistics_at: dict[str, float] = {}


def _statistics_due(url: URL) -> bool:
    key = url.render_as_string(hide_password=True)
    with _statistics_lock:
        last = _statistics_at.get(key)
        if last is not None and time.monotonic() - last < STATISTICS_EVERY_SECONDS:
            return False
        _statistics_at[key] = time.monotonic()
        return True


class SqlFlakyStore:
    def __init__(
        self, session: Session, *, on_commit: Callable[[Callable[[], object]], None] | None = None
    ) -> None:
        self._session = session
        self._on_commit = on_commit

    # --- settings -------------------------------------------------------------------------

    def settings(self, repository_id: RepositoryId) -> FlakySettings:
        row = self._session.get(FlakySettingsRow, repository_id)
        if row is None:
            return FlakySettings()
        return FlakySettings(
            monitors=monitors_from_dict(row.monitors),
            quarantine=QuarantineSettings(
                enabled=row.quarantine_enabled,
                auto_quarantine_flaky=row.auto_quarantine_flaky,
                auto_quarantine_broken=row.auto_quarantine_broken,
            ),
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
        row.auto_quarantine_broken = settings.quarantine.auto_quarantine_broken
        row.ticket_url_template = settings.ticket_url_template
        row.monitors = monitors_to_dict(settings.monitors)
        row.updated_at = at
        self._session.flush()

    # --- ingest ---------------------------------------------------------------------------

    def claim_upload(self, upload: UploadRecord) -> UploadRecord | None:
        dialect = self._session.get_bind().dialect.name
        insert = postgresql_insert if dialect == "postgresql" else sqlite_insert
        table = table_of(TestUploadRow)
        claimed = self._session.execute(
            insert(table)
            .values(
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
                upload_key=upload.upload_key,
                failed_tests=list(upload.failed_tests),
            )
            # PostgreSQL waits here for a transaction inserting the same key, then skips the
            # row if that one committed.
            .on_conflict_do_nothing(index_elements=["repository_id", "upload_key"])
            .returning(table.c.id)
        ).first()
        if claimed is not None:
            return None
        row = self._session.scalars(
            select(TestUploadRow).where(
                TestUploadRow.repository_id == upload.repository_id,
                TestUploadRow.upload_key == upload.upload_key,
            )
        ).one()
        return upload_of(row)

    def add_tests(
        self,
        upload: UploadRecord,
        tests: Sequence[TestTally],
        codeowners: Mapping[str | None, tuple[str, ...]],
        *,
        roll_up: bool,
        by_branch: bool = False,
        hold: Collection[str] = (),
    ) -> None:
        added = UploadWriter(self._session).write(
            upload, tests, codeowners, roll_up=roll_up, by_branch=by_branch, hold=hold
        )
        if added >= STATISTICS_AFTER_NEW_TESTS and self._on_commit is not None:
            self._on_commit(self._refresh_statistics)

    def _refresh_statistics(self) -> None:
        """PostgreSQL's statistics of the tests, brought up to date after many new ones: the
        listings' plans follow them, and autovacuum may take a minute or more to get there.
        """
        bind = self._session.get_bind()
        if bind.dialect.name != "postgresql" or not _statistics_due(bind.engine.url):
            return
        with bind.engine.connect() as connection:
            connection.execute(text("ANALYZE test_cases"))
            connection.commit()

    def hold_tests(self, repository_id: RepositoryId, ids: Collection[str]) -> set[str]:
        if self._session.get_bind().dialect.name != "postgresql":
            return set(ids)  # SQLite's writers already run one at a time
        held: set[str] = set()
        for chunk in chunks(sorted(ids)):
            held.update(
                self._session.scalars(
                    select(TestCaseRow.id)
                    .where(TestCaseRow.repository_id == repository_id, TestCaseRow.id.in_(chunk))
                    .order_by(TestCaseRow.id)
                    .with_for_update(skip_locked=True)
                )
            )
        return held

    def failing_on_commit(self, repository_id: RepositoryId, commit_sha: str) -> set[str]:
        return self._failed_on(repository_id, commit_sha)

    def _failed_on(
        self, repository_id: RepositoryId, commit_sha: str, *also: ColumnElement[bool]
    ) -> set[str]:
        """The tests with a failure on the commit (and `also`), through the partial index
        ix_test_commit_rollups_failed: the commit's passing rows are never read.
        """
        return set(
            self._session.scalars(
                select(TestCommitRow.test_case_id).where(
                    TestCommitRow.repository_id == repository_id,
                    TestCommitRow.commit_sha == commit_sha,
                    FAILED_ON_COMMIT,
                    *also,
                )
            )
        )

    # --- reads for detection --------------------------------------------------------------

    def tests(self, repository_id: RepositoryId, ids: Collection[str]) -> Mapping[str, TestCase]:
        return load_tests(self._session, repository_id, ids)

    def test(self, repository_id: RepositoryId, test_id: str) -> TestCase | None:
        row = self._session.get(TestCaseRow, (repository_id, test_id))
        return None if row is None else test_case_of(row)

    def mixed_on_commit(self, repository_id: RepositoryId, commit_sha: str) -> set[str]:
        return self._failed_on(repository_id, commit_sha, TestCommitRow.passes > 0)

    def buckets(
        self, repository_id: RepositoryId, ids: Collection[str], since: datetime
    ) -> Mapping[str, list[HourBucket]]:
        # The table is keyed by hour and branch first: a test's buckets are probed at each
        # hour and branch an upload came from, not read as one range.
        uploads = self._session.execute(
            select(TestUploadRow.received_at, TestUploadRow.branch).where(
                TestUploadRow.repository_id == repository_id,
                TestUploadRow.received_at >= since,
                TestUploadRow.excluded == false(),
            )
        )
        pairs = sorted({(hour_of(at), branch) for at, branch in uploads if hour_of(at) >= since})
        found: dict[str, list[HourBucket]] = defaultdict(list)
        hours = TestHourRow.__table__.c
        for hour_chunk in chunks(pairs):
            for chunk in chunks(ids):
                query = select(
                    hours.test_case_id,
                    hours.hour,
                    hours.branch,
                    hours.runs,
                    hours.failures,
                    hours.last_run_at,
                    hours.last_failure_at,
                ).where(
                    hours.repository_id == repository_id,
                    tuple_(hours.hour, hours.branch).in_(hour_chunk),
                )
                rows = self._session.execute(
                    of_tests(self._session, query, hours.test_case_id, chunk)
                )
                for row in rows:
                    found[str(row[0])].append(HourBucket(*row[1:]))
        return found

    def failing_commits(
        self,
        repository_id: RepositoryId,
        ids: Collection[str],
        since: datetime,
        *,
        branches: Collection[str] | None = None,
    ) -> Mapping[str, list[CommitRuns]]:
        # Through ix_test_commit_rollups_failing_test: a test's passing rows are never read.
        wanted = [FAILED_ON_COMMIT, TestCommitRow.last_run_at >= since]
        if branches is not None:
            wanted.append(or_(TestCommitRow.passes > 0, TestCommitRow.branch.in_(sorted(branches))))
        found: dict[str, list[CommitRuns]] = defaultdict(list)
        for chunk in chunks(ids):
            for test_id, runs in self._commit_runs(repository_id, chunk, *wanted):
                found[test_id].append(runs)
        return found

    def commits_since(self, repository_id: RepositoryId, since: datetime) -> Sequence[CommitSeen]:
        first_at = func.min(TestUploadRow.received_at)
        rows = self._session.execute(
            select(TestUploadRow.commit_sha, TestUploadRow.branch, first_at)
            .where(
                TestUploadRow.repository_id == repository_id,
                TestUploadRow.received_at >= since,
                TestUploadRow.excluded == false(),
            )
            .group_by(TestUploadRow.commit_sha, TestUploadRow.branch)
            .order_by(first_at.desc(), TestUploadRow.commit_sha)
        )
        return [CommitSeen(sha, branch, at) for sha, branch, at in rows]

    def commit_runs(
        self, repository_id: RepositoryId, commit_shas: Collection[str], ids: Collection[str]
    ) -> Sequence[tuple[str, CommitRuns]]:
        found: list[tuple[str, CommitRuns]] = []
        for chunk in chunks(ids):
            found += self._commit_runs(
                repository_id, chunk, TestCommitRow.commit_sha.in_(list(commit_shas))
            )
        return found

    def _commit_runs(
        self, repository_id: RepositoryId, ids: list[str], *conditions: ColumnElement[bool]
    ) -> list[tuple[str, CommitRuns]]:
        commits = TestCommitRow.__table__.c
        query = select(
            commits.test_case_id,
            commits.commit_sha,
            commits.branch,
            commits.pr_number,
            commits.passes,
            commits.failures,
            commits.first_pass_at,
            commits.first_failure_at,
            commits.last_run_at,
            commits.runs,
        ).where(commits.repository_id == repository_id, *conditions)
        query = of_tests(self._session, query, commits.test_case_id, ids)
        return [
            (test_id, CommitRuns(sha, branch, pr, passes, failures, passed, failed, last, runs))
            for test_id, sha, branch, pr, passes, failures, passed, failed, last, runs in (
                self._session.execute(query)
            )
        ]

    # --- status and per-test settings -----------------------------------------------------

    def save_statuses(self, repository_id: RepositoryId, statuses: Sequence[SavedStatus]) -> None:
        if not statuses:
            return
        table = table_of(TestCaseRow)
        statement = (
            update(table)
            .where(table.c.repository_id == repository_id, table.c.id == bindparam("test_id"))
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
                        key: state_to_json(state) for key, state in saved.monitors.items()
                    },
                }
                for saved in sorted(statuses, key=lambda saved: saved.test_id)
            ],
        )

    def add_status_change(self, repository_id: RepositoryId, change: StatusChange) -> None:
        self._session.add(
            TestStatusChangeRow(
                repository_id=repository_id,
                test_case_id=change.test_case_id,
                at=change.at,
                status=change.status.value,
                reason=change.reason,
            )
        )

    def set_manual_flag(
        self, repository_id: RepositoryId, test_id: str, flag: ManualFlag | None
    ) -> None:
        self._session.execute(
            update(TestCaseRow)
            .where(TestCaseRow.repository_id == repository_id, TestCaseRow.id == test_id)
            .values(
                manual_flag_reason=flag.reason if flag else None,
                manual_flag_at=flag.at if flag else None,
            )
        )

    def set_override(
        self,
        repository_id: RepositoryId,
        test_id: str,
        override: QuarantineOverride | None,
        *,
        at: datetime,
    ) -> None:
        self._session.execute(
            update(TestCaseRow)
            .where(TestCaseRow.repository_id == repository_id, TestCaseRow.id == test_id)
            .values(
                quarantine_override=override.value if override else None,
                quarantine_override_at=at if override else None,
            )
        )

    def set_ticket(self, repository_id: RepositoryId, test_id: str, ticket: str) -> None:
        self._session.execute(
            update(TestCaseRow)
            .where(TestCaseRow.repository_id == repository_id, TestCaseRow.id == test_id)
            .values(ticket=ticket)
        )

    def unhealthy_ids(self, repository_id: RepositoryId) -> Sequence[str]:
        return list(
            self._session.scalars(
                select(TestCaseRow.id).where(
                    TestCaseRow.repository_id == repository_id,
                    TestCaseRow.status.in_(UNHEALTHY),
                )
            )
        )

    def unhealthy_by_repository(self) -> Mapping[RepositoryId, Sequence[str]]:
        found: dict[RepositoryId, list[str]] = defaultdict(list)
        rows = self._session.execute(
            select(TestCaseRow.repository_id, TestCaseRow.id).where(
                TestCaseRow.status.in_(UNHEALTHY)
            )
        )
        for repository_id, test_id in rows:
            found[RepositoryId(repository_id)].append(test_id)
        return found

    def quarantined_ids(
        self, repository_id: RepositoryId, settings: FlakySettings, ids: Collection[str]
    ) -> set[str]:
        found: set[str] = set()
        for chunk in chunks(ids):
            found.update(
                self._session.scalars(
                    select(TestCaseRow.id).where(
                        quarantined(repository_id, settings), TestCaseRow.id.in_(chunk)
                    )
                )
            )
        return found

    # --- reads for the merge queue --------------------------------------------------------

    def failed_on_commits(
        self, repository_id: RepositoryId, received_since: Mapping[str, datetime]
    ) -> Mapping[str, Sequence[FailedOnCommit]]:
        found: dict[str, dict[str, FailedOnCommit]] = {}
        upload, result, test = TestUploadRow, TestResultRow, TestCaseRow
        failed = and_(
            result.repository_id == upload.repository_id,
            result.outcome == Outcome.FAILED.value,
            # A result's `at` is its upload's received_at (add_results): with it, the join
            # reads only the upload's failed results through ix_test_results_repository_
            # outcome_at instead of every result of the upload.
            result.at == upload.received_at,
            result.upload_id == upload.id,
        )
        of_result = and_(test.repository_id == result.repository_id, test.id == result.test_case_id)
        for chunk in chunks(sorted(received_since)):
            # The ix_test_uploads_repository_received range from the oldest time asked for;
            # the exact time of each commit is applied below.
            rows = self._session.execute(
                select(
                    upload.commit_sha,
                    upload.received_at,
                    test.id,
                    test.name,
                    test.classname,
                    test.status,
                    test.quarantine_override,
                )
                .distinct()
                .select_from(upload)
                .outerjoin(result, failed)
                .outerjoin(test, of_result)
                .where(
                    upload.repository_id == repository_id,
                    upload.received_at >= min(received_since[sha] for sha in chunk),
                    upload.commit_sha.in_(chunk),
                )
            )
            for sha, received_at, test_id, name, classname, status, override in rows:
                if received_at < received_since[sha]:
                    continue
                on_commit = found.setdefault(sha, {})
                if test_id is not None:
                    on_commit[test_id] = FailedOnCommit(
                        test_id=test_id,
                        name=name,
                        classname=classname,
                        status=TestStatus(status),
                        quarantine_override=QuarantineOverride(override) if override else None,
                    )
        return {sha: list(failed_tests.values()) for sha, failed_tests in found.items()}

    def has_upload_since(self, repository_id: RepositoryId, since: datetime) -> bool:
        first = self._session.scalar(
            select(TestUploadRow.id)
            .where(TestUploadRow.repository_id == repository_id, TestUploadRow.received_at >= since)
            .limit(1)
        )
        return first is not None

    # --- housekeeping ---------------------------------------------------------------------

    def purge(self, *, results_before: datetime, rollups_before: datetime) -> int:
        deleted = 0
        statements = [
            delete(TestResultRow).where(TestResultRow.at < results_before),
            # A day's count outlives its results only while some of them are kept.
            delete(TestFailureDayRow).where(TestFailureDayRow.last_at < results_before),
            delete(TestUploadRow).where(TestUploadRow.received_at < results_before),
            delete(TestHourRow).where(TestHourRow.hour < rollups_before),
            delete(TestHourTotalRow).where(TestHourTotalRow.hour < rollups_before),
            delete(TestDayTotalRow).where(TestDayTotalRow.day < rollups_before),
            delete(TestFailureTemplateRow).where(TestFailureTemplateRow.day < rollups_before),
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
