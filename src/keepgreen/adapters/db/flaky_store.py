"""The flaky-test store on SQL: test cases, raw results, rollups, status history."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    and_,
    bindparam,
    delete,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from keepgreen.adapters.db.flaky_rows import (
    chunks,
    greatest,
    load_tests,
    quarantined,
    state_to_json,
    table_of,
    test_case_of,
)
from keepgreen.adapters.db.tables import (
    FlakySettingsRow,
    InstanceSecretRow,
    RepositoryRow,
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
    FailedOnCommit,
    FailureDelta,
    HourDelta,
    ResultRecord,
    SavedStatus,
    UploadRecord,
)
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
                greatest(table.c[name], new[name], dialect), table.c[name], new[name]
            )
        for name in earliest:
            changes[name] = func.coalesce(table.c[name], new[name])
        # Rows in key order: concurrent uploads then lock shared rows in the same order and
        # cannot deadlock each other on PostgreSQL.
        ordered = sorted(rows, key=lambda row: tuple(str(row[key]) for key in keys))
        self._session.execute(
            statement.on_conflict_do_update(index_elements=keys, set_=changes), ordered
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

    def lock_repository(self, repository_id: RepositoryId) -> None:
        # FOR UPDATE on PostgreSQL; SQLite's BEGIN IMMEDIATE already serialises writers.
        self._session.execute(
            select(RepositoryRow.id).where(RepositoryRow.id == repository_id).with_for_update()
        )

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

    def ensure_tests(
        self, repository_id: RepositoryId, tests: Sequence[TestCase], *, seen_at: datetime
    ) -> None:
        strays = {test.repository_id for test in tests} - {repository_id}
        if strays:
            raise ValueError(f"tests of repositories {sorted(strays)} given for {repository_id}")
        by_id = {test.id: test for test in tests}
        existing: dict[str, list[str]] = {}
        for chunk in chunks(by_id):
            rows_found = self._session.execute(
                select(TestCaseRow.id, TestCaseRow.codeowners).where(
                    TestCaseRow.repository_id == repository_id, TestCaseRow.id.in_(chunk)
                )
            )
            existing.update((test_id, owners or []) for test_id, owners in rows_found)
        rows: list[dict[str, Any]] = [
            {
                "id": test.id,
                "repository_id": repository_id,
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
            rows.sort(key=lambda row: str(row["id"]))  # lock order, as in _upsert
            self._session.execute(insert(table_of(TestCaseRow)).on_conflict_do_nothing(), rows)
        seen = sorted(test_id for test_id in by_id if test_id in existing)
        for chunk in chunks(seen):
            self._session.execute(
                update(TestCaseRow)
                .where(TestCaseRow.repository_id == repository_id, TestCaseRow.id.in_(chunk))
                .values(last_seen_at=seen_at)
            )
        owned: dict[tuple[str, ...], list[str]] = defaultdict(list)
        for test_id in seen:
            owners = by_id[test_id].codeowners
            if owners and list(owners) != existing[test_id]:
                owned[owners].append(test_id)
        for owners, ids in owned.items():
            for chunk in chunks(ids):
                self._session.execute(
                    update(TestCaseRow)
                    .where(TestCaseRow.repository_id == repository_id, TestCaseRow.id.in_(chunk))
                    .values(codeowners=list(owners))
                )

    def add_results(self, upload: UploadRecord, results: Sequence[ResultRecord]) -> None:
        insert_results = insert(table_of(TestResultRow))
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
        repository_id: RepositoryId,
        hours: Sequence[HourDelta],
        commits: Sequence[CommitDelta],
        failures: Sequence[FailureDelta],
    ) -> None:
        self._upsert(
            TestHourRow.__table__,
            [
                {
                    "repository_id": repository_id,
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
            keys=["repository_id", "test_case_id", "hour", "branch"],
            add=["runs", "failures"],
            latest=["last_run_at", "last_failure_at"],
        )
        self._upsert(
            TestCommitRow.__table__,
            [
                {
                    "repository_id": repository_id,
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
                    "runs": 1,  # one delta per test per upload
                }
                for delta in commits
            ],
            keys=["repository_id", "test_case_id", "commit_sha"],
            add=["passes", "failures", "runs"],
            latest=["last_failure_at", "last_run_at"],
            earliest=["first_pass_at", "first_failure_at"],
        )
        self._upsert(
            TestFailureRow.__table__,
            [
                {
                    "repository_id": repository_id,
                    "test_case_id": delta.test_case_id,
                    "day": delta.day,
                    "summary_key": delta.summary_key,
                    "summary": delta.summary,
                    "occurrences": delta.occurrences,
                    "last_at": delta.at,
                }
                for delta in failures
            ],
            keys=["repository_id", "test_case_id", "day", "summary_key"],
            add=["occurrences"],
            latest=["last_at"],
        )

    # --- reads for detection --------------------------------------------------------------

    def tests(self, repository_id: RepositoryId, ids: Collection[str]) -> Mapping[str, TestCase]:
        return load_tests(self._session, repository_id, ids)

    def test(self, repository_id: RepositoryId, test_id: str) -> TestCase | None:
        row = self._session.get(TestCaseRow, (repository_id, test_id))
        return None if row is None else test_case_of(row)

    def mixed_on_commit(
        self, repository_id: RepositoryId, ids: Collection[str], commit_sha: str
    ) -> set[str]:
        mixed: set[str] = set()
        for chunk in chunks(ids):
            mixed.update(
                self._session.scalars(
                    select(TestCommitRow.test_case_id).where(
                        TestCommitRow.repository_id == repository_id,
                        TestCommitRow.test_case_id.in_(chunk),
                        TestCommitRow.commit_sha == commit_sha,
                        TestCommitRow.passes > 0,
                        TestCommitRow.failures > 0,
                    )
                )
            )
        return mixed

    def buckets(
        self, repository_id: RepositoryId, ids: Collection[str], since: datetime
    ) -> Mapping[str, list[HourBucket]]:
        found: dict[str, list[HourBucket]] = defaultdict(list)
        hours = TestHourRow.__table__.c
        for chunk in chunks(ids):
            rows = self._session.execute(
                select(
                    hours.test_case_id,
                    hours.hour,
                    hours.branch,
                    hours.runs,
                    hours.failures,
                    hours.last_run_at,
                    hours.last_failure_at,
                ).where(
                    hours.repository_id == repository_id,
                    hours.test_case_id.in_(chunk),
                    hours.hour >= since,
                )
            )
            for test_id, *values in rows:
                found[test_id].append(HourBucket(*values))
        return found

    def commits(
        self, repository_id: RepositoryId, ids: Collection[str], since: datetime
    ) -> Mapping[str, list[CommitRuns]]:
        found: dict[str, list[CommitRuns]] = defaultdict(list)
        commits = TestCommitRow.__table__.c
        for chunk in chunks(ids):
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
                    commits.runs,
                ).where(
                    commits.repository_id == repository_id,
                    commits.test_case_id.in_(chunk),
                    commits.last_run_at >= since,
                )
            )
            for test_id, *values in rows:
                found[test_id].append(CommitRuns(*values))
        return found

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
                    TestCaseRow.status != TestStatus.HEALTHY.value,
                )
            )
        )

    def unhealthy_by_repository(self) -> Mapping[RepositoryId, Sequence[str]]:
        found: dict[RepositoryId, list[str]] = defaultdict(list)
        rows = self._session.execute(
            select(TestCaseRow.repository_id, TestCaseRow.id).where(
                TestCaseRow.status != TestStatus.HEALTHY.value
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
