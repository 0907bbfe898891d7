"""The flaky-test store port: what the use cases read and write, as plain values.

Roll-ups are added to, never overwritten, so concurrent uploads sum correctly.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from keepgreen.app.flaky.settings import FlakySettings
from keepgreen.app.flaky.tally import TestTally
from keepgreen.core.flaky.ci_runs import CiRun
from keepgreen.core.flaky.failures import FailureCount
from keepgreen.core.flaky.model import StatusChange, TestCase
from keepgreen.core.flaky.monitors import (
    CommitRuns,
    HourBucket,
    ManualFlag,
    MonitorState,
    TestStatus,
)
from keepgreen.core.flaky.quarantine import QuarantineOverride
from keepgreen.core.ids import RepositoryId


@dataclass(frozen=True, slots=True)
class UploadRecord:
    id: str
    repository_id: RepositoryId
    commit_sha: str
    branch: str
    pr_number: int | None
    job_url: str | None
    run_id: str | None
    variant: str
    received_at: datetime
    files: int
    tests: int
    results: int
    failed: int
    skipped: int
    excluded: bool
    # Who sent it: a retried upload with the same key is stored once (see claim_upload).
    upload_key: str | None = None
    failed_tests: tuple[str, ...] = ()  # the tests whose final outcome failed, by id


@dataclass(frozen=True, slots=True)
class FailureRates:
    """Runs and failures of one test over the last 7 days and the last 24 hours."""

    runs_7d: int = 0
    failures_7d: int = 0
    runs_24h: int = 0
    failures_24h: int = 0


@dataclass(frozen=True, slots=True)
class CommitSeen:
    """A commit detection has results of: on which branch, and when it was first uploaded."""

    commit_sha: str
    branch: str
    first_at: datetime


@dataclass(frozen=True, slots=True)
class FailedOnCommit:
    """A test with a failed attempt in an upload of one commit, as keepgreen knows it now."""

    test_id: str
    name: str
    classname: str | None
    status: TestStatus
    quarantine_override: QuarantineOverride | None


@dataclass(frozen=True, slots=True)
class SavedStatus:
    """A test's status and monitor states after an evaluation."""

    test_id: str
    status: TestStatus
    reason: str
    status_at: datetime
    monitors: Mapping[str, MonitorState]


class FlakyStore(Protocol):
    """Tests, their results, rollups and statuses, always within one repository.

    A test id is public (anyone can compute it, or send it as a report's `id`), so it only
    names a test together with its repository: every method that reads or writes tests takes
    the repository and never reaches a row of another one, whatever ids it is given.
    """

    def settings(self, repository_id: RepositoryId) -> FlakySettings:
        """The repository's settings (the defaults when never saved)."""
        ...

    def save_settings(
        self, repository_id: RepositoryId, settings: FlakySettings, *, at: datetime
    ) -> None: ...

    def claim_upload(self, upload: UploadRecord) -> UploadRecord | None:
        """Store the upload's row, unless its repository already has an upload with its
        `upload_key`: then nothing is stored and that upload is answered. A claim racing
        another with the same key waits for it (PostgreSQL) or runs after it (SQLite).
        """
        ...

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
        """Store what the upload (claimed) says of each test, set-based: tests not stored yet
        are added (healthy, owned as `codeowners` says for their file); last_seen_at moves
        (to the hour) and owners change where `codeowners` names the test's file; each failed
        attempt becomes a result; and when `roll_up`, the hour and day totals, per-commit and
        failure-summary roll-ups add the upload's counts, and the hourly buckets per branch
        too when `by_branch` (only the rate and count monitors read those: a repository with
        none enabled does not pay for them). Every row is of the upload's repository.

        The rows of the tests in `hold` (the ones the caller will evaluate) stay held until
        commit. Concurrent uploads of one repository do not wait on each other unless they
        share tests, and then they take every row in the same order, the tests' own rows
        first, then the roll-ups', each in test id order: they never deadlock on PostgreSQL.
        """
        ...

    def hold_tests(self, repository_id: RepositoryId, ids: Collection[str]) -> set[str]:
        """Hold these tests' rows until commit, skipping those another transaction holds now
        (waiting for them could deadlock); answers the ones held. For tests found late, after
        `add_tests`: whoever holds a skipped one is evaluating it already.
        """
        ...

    def failing_on_commit(self, repository_id: RepositoryId, commit_sha: str) -> set[str]:
        """The tests with a failed attempt on `commit_sha` (passed or not)."""
        ...

    def tests(self, repository_id: RepositoryId, ids: Collection[str]) -> Mapping[str, TestCase]:
        """Those of `ids` that are tests of the repository."""
        ...

    def test(self, repository_id: RepositoryId, test_id: str) -> TestCase | None: ...

    def mixed_on_commit(self, repository_id: RepositoryId, commit_sha: str) -> set[str]:
        """The tests that both passed and failed on `commit_sha`."""
        ...

    def buckets(
        self, repository_id: RepositoryId, ids: Collection[str], since: datetime
    ) -> Mapping[str, list[HourBucket]]: ...

    def failing_commits(
        self,
        repository_id: RepositoryId,
        ids: Collection[str],
        since: datetime,
        *,
        branches: Collection[str] | None = None,
    ) -> Mapping[str, list[CommitRuns]]:
        """Per test, its commit rollups with a run at or after `since` that failed and passed
        (mixed), and those that failed on one of `branches` (None: on any branch).
        """
        ...

    def commits_since(self, repository_id: RepositoryId, since: datetime) -> Sequence[CommitSeen]:
        """The commits uploads brought into detection at or after `since`, the newest first
        (by their first such upload).
        """
        ...

    def commit_runs(
        self, repository_id: RepositoryId, commit_shas: Collection[str], ids: Collection[str]
    ) -> Sequence[tuple[str, CommitRuns]]:
        """The rollups of tests `ids` on commits `commit_shas`, each with its test's id."""
        ...

    def save_statuses(
        self, repository_id: RepositoryId, statuses: Sequence[SavedStatus]
    ) -> None: ...

    def add_status_change(self, repository_id: RepositoryId, change: StatusChange) -> None: ...

    def set_manual_flag(
        self, repository_id: RepositoryId, test_id: str, flag: ManualFlag | None
    ) -> None: ...

    def set_override(
        self,
        repository_id: RepositoryId,
        test_id: str,
        override: QuarantineOverride | None,
        *,
        at: datetime,
    ) -> None: ...

    def set_ticket(self, repository_id: RepositoryId, test_id: str, ticket: str) -> None: ...

    def unhealthy_ids(self, repository_id: RepositoryId) -> Sequence[str]:
        """The repository's tests whose status is not healthy (every active monitor makes a
        test unhealthy).
        """
        ...

    def unhealthy_by_repository(self) -> Mapping[RepositoryId, Sequence[str]]:
        """Every repository's unhealthy tests (for the sweep, which serves all of them)."""
        ...

    def quarantined_ids(
        self, repository_id: RepositoryId, settings: FlakySettings, ids: Collection[str]
    ) -> set[str]: ...

    def failed_on_commits(
        self, repository_id: RepositoryId, received_since: Mapping[str, datetime]
    ) -> Mapping[str, Sequence[FailedOnCommit]]:
        """For each commit sha of `received_since` with at least one upload received at or
        after the time given for it: the tests with a failed attempt in those uploads, each
        once, in no particular order (empty when none failed). A commit with no such upload
        is absent. Excluded uploads (an infrastructure failure) count like any other.
        """
        ...

    def has_upload_since(self, repository_id: RepositoryId, since: datetime) -> bool:
        """Whether the repository received an upload at or after `since`."""
        ...

    def purge(self, *, results_before: datetime, rollups_before: datetime) -> int:
        """Delete raw results and uploads older than `results_before` and rollups older than
        `rollups_before`; the number of rows deleted.
        """
        ...

    def secret(self, name: str, make: str) -> str:
        """The installation's secret `name`, stored as `make` the first time it is asked for."""
        ...


class FlakyListings(Protocol):
    """The read API's queries over test cases, rollups and status history, within one
    repository (as FlakyStore).
    """

    def status_history(
        self, repository_id: RepositoryId, test_id: str
    ) -> Sequence[StatusChange]: ...

    def count_by_status(self, repository_id: RepositoryId, status: TestStatus) -> int: ...

    def page_by_status(
        self, repository_id: RepositoryId, status: TestStatus, *, offset: int, limit: int
    ) -> Sequence[TestCase]: ...

    def count_failing(self, repository_id: RepositoryId, start: datetime, end: datetime) -> int: ...

    def page_failing(
        self,
        repository_id: RepositoryId,
        start: datetime,
        end: datetime,
        *,
        offset: int,
        limit: int,
    ) -> tuple[Sequence[TestCase], int]:
        """Distinct tests with a failed result in [start, end), most failures first: the
        page, and how many such tests there are in all.
        """
        ...

    def count_quarantined(self, repository_id: RepositoryId, settings: FlakySettings) -> int: ...

    def page_quarantined(
        self, repository_id: RepositoryId, settings: FlakySettings, *, offset: int, limit: int
    ) -> Sequence[TestCase]: ...

    def failure_rates(
        self, repository_id: RepositoryId, ids: Collection[str], *, now: datetime
    ) -> Mapping[str, FailureRates]: ...

    def daily_totals(
        self, repository_id: RepositoryId, test_id: str, days: Sequence[datetime]
    ) -> Mapping[datetime, tuple[int, int]]:
        """The test's (runs, failures) on every branch, of each of `days` (UTC midnights) it
        ran on.
        """
        ...

    def pull_requests_impacted(
        self, repository_id: RepositoryId, ids: Collection[str], since: datetime
    ) -> Mapping[str, int]: ...

    def failure_counts(
        self, repository_id: RepositoryId, ids: Collection[str], since: datetime
    ) -> Mapping[str, list[FailureCount]]: ...


class CiRunStore(Protocol):
    """The CI runs CI reported (create-ci-run), always within one repository."""

    def claim(self, run: CiRun) -> CiRun | None:
        """Store the new run, unless its repository has a run with its `run_key` already:
        then nothing is stored and that run is answered (a run without a key is always
        stored). A claim racing another with the same key waits for it (PostgreSQL) or runs
        after it (SQLite).
        """
        ...

    def save(self, run: CiRun) -> None:
        """Write every field of a stored run (found by its id and repository)."""
        ...

    def page(
        self,
        repository_id: RepositoryId,
        *,
        branch: str | None,
        sha: str | None,
        offset: int,
        limit: int,
    ) -> tuple[Sequence[CiRun], int]:
        """The repository's runs on `branch` and of `sha` (None: any), latest start first: the
        page, and how many such runs there are in all.
        """
        ...

    def purge(self, *, before: datetime) -> int:
        """Delete the runs last reported before `before`, of every repository; how many."""
        ...
