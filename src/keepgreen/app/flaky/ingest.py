"""Ingest: one upload of JUnit reports becomes test cases, raw results, rollups and statuses.

Every report is parsed before anything is written, and everything is written in one
transaction: a bad report refuses the whole upload (400 naming the file), nothing half-stored.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import NamedTuple, Protocol

import structlog

from keepgreen.app.errors import InvalidInput, KeepgreenError
from keepgreen.app.flaky.detection import Detector
from keepgreen.app.flaky.store import (
    CommitDelta,
    FailureDelta,
    FlakyStore,
    HourDelta,
    ResultRecord,
    UploadRecord,
)
from keepgreen.app.lookup import find_repository
from keepgreen.app.ports import Clock, IdFactory, UnitOfWork, UnitOfWorkFactory
from keepgreen.app.telemetry import Telemetry
from keepgreen.core.flaky.failures import failure_summary, summary_key
from keepgreen.core.flaky.ids import make_test_id, repo_full_name
from keepgreen.core.flaky.model import TestCase
from keepgreen.core.flaky.monitors import NO_MONITOR_ACTIVE, TestStatus
from keepgreen.core.flaky.results import CaseResult, Outcome
from keepgreen.core.ids import OrgId
from keepgreen.core.model import RepoRef, Repository

# Infrastructure protection needs a sample: one failing test alone is not an outage.
MIN_TESTS_FOR_INFRASTRUCTURE_CHECK = 10
# Results (runs of tests, reruns included) per upload. Storing is the slow part of an upload,
# at about 5,000 results a second on SQLite and 2,000 on PostgreSQL on a busy 2-core machine:
# 200,000 stay within a CI job's patience, and a larger job can split its reports into several
# uploads. Reading stops at the first result past the limit.
MAX_RESULTS_PER_UPLOAD = 200_000
# Characters of text the results of one upload keep: names, paths and failure summaries (a
# failure's body is summarised as its report is read, then dropped). Each field is cut to its
# limit while reading, but gzip makes a few hundred thousand distinct, nearly equal names cheap
# to send; this bounds what they cost to hold, while a real upload at the result limit, with
# Java-length names, keeps about 40 million.
MAX_TEXT_PER_UPLOAD = 128 * 1024 * 1024

log = structlog.get_logger(__name__)


class ResultLimitReached(Exception):
    """Raised by a ReportParser at the first result past its `max_results`."""


class ReportParser(Protocol):
    """Reads one report; raises InvalidInput naming the file when it cannot, and
    ResultLimitReached, without reading on, at its first result past `max_results`.
    """

    def __call__(self, filename: str, data: bytes, *, max_results: int) -> list[CaseResult]: ...


class Owners(Protocol):
    def owners_of(self, path: str | None) -> list[str]: ...


class OwnersSource(Protocol):
    """CODEOWNERS: from text an upload carries, or from the repository's default branch."""

    def from_text(self, text: str) -> Owners: ...

    def from_repository(self, repository: Repository) -> Owners | None: ...


@dataclass(frozen=True, slots=True)
class UploadMetadata:
    repo: RepoRef
    org_url_slug: str | None
    commit_sha: str
    branch: str
    pr_number: int | None = None
    job_url: str | None = None
    variant: str = ""
    run_id: str | None = None
    codeowners: str | None = None


@dataclass(frozen=True, slots=True)
class ReportFile:
    filename: str
    data: bytes


@dataclass(frozen=True, slots=True)
class FailedTest:
    test_id: str
    name: str
    classname: str | None
    parent: str | None
    file: str | None
    quarantined: bool


@dataclass(frozen=True, slots=True)
class UploadSummary:
    upload_id: str
    files: int
    tests: int
    results: int
    passed: int
    failed: int
    skipped: int
    excluded_as_infrastructure_failure: bool
    quarantine_enabled: bool
    failures: tuple[FailedTest, ...]


@dataclass(frozen=True, slots=True)
class _Identified:
    test_id: str
    result: CaseResult  # its message and detail dropped (see _kept)
    summary: str | None  # a failure's, from its message and detail


class _Kept(NamedTuple):
    """What an upload keeps of one result until it is stored."""

    result: CaseResult  # without message and detail: a failure's summary says what counts
    summary: str | None

    def text_chars(self) -> int:
        result = self.result
        fields = (result.name, result.classname, result.parent, result.file, result.custom_id)
        return sum(len(field) for field in (*fields, self.summary) if field is not None)


def _kept(result: CaseResult) -> _Kept:
    # A failure's body (up to MAX_DETAIL_CHARS) is only read for its summary: summarised here,
    # as each report is read, only one report's bodies are ever held.
    summary = (
        failure_summary(result.message, result.detail) if result.outcome is Outcome.FAILED else None
    )
    if result.message is not None or result.detail is not None:
        result = replace(result, message=None, detail=None)
    return _Kept(result, summary)


def _hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def _day(moment: datetime) -> datetime:
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


def final_outcomes(results: Sequence[_Identified]) -> dict[str, Outcome]:
    """Each test's outcome in this upload: its last attempt that ran (a failure followed by a
    pass on retry is a pass), skipped only when it never ran.
    """
    final: dict[str, tuple[tuple[int, int, int], Outcome]] = {}
    for order, item in enumerate(results):
        outcome = item.result.outcome
        rank = (0 if outcome is Outcome.SKIPPED else 1, item.result.attempt, order)
        current = final.get(item.test_id)
        if current is None or rank > current[0]:
            final[item.test_id] = (rank, outcome)
    return {test_id: outcome for test_id, (_rank, outcome) in final.items()}


def is_infrastructure_failure(outcomes: Counter[Outcome], *, share: float) -> bool:
    """At least `share` of the tests that ran failed, and enough ran to call it an outage."""
    ran = outcomes[Outcome.PASSED] + outcomes[Outcome.FAILED]
    return ran >= MIN_TESTS_FOR_INFRASTRUCTURE_CHECK and outcomes[Outcome.FAILED] >= share * ran


def _identify(
    repository: Repository,
    org_slug: str,
    metadata: UploadMetadata,
    parsed: Sequence[tuple[str, list[_Kept]]],
    owners: Owners | None,
    *,
    now: datetime,
) -> tuple[list[_Identified], dict[str, TestCase]]:
    """Every result with its test id, and the test cases they are results of (new ones
    healthy, with their owners).
    """
    repo_name = repo_full_name(repository.ref.host, repository.ref.owner, repository.ref.name)
    identified: list[_Identified] = []
    cases: dict[str, TestCase] = {}
    owners_by_file: dict[str | None, tuple[str, ...]] = {}
    for _filename, results in parsed:
        for result, summary in results:
            test_id = make_test_id(
                org_slug,
                repo_name,
                file=result.file,
                classname=result.classname,
                parent=result.parent,
                name=result.name,
                custom_id=result.custom_id,
                variant=metadata.variant,
            )
            identified.append(_Identified(test_id, result, summary))
            if test_id in cases:
                continue
            if result.file not in owners_by_file:
                owners_by_file[result.file] = tuple(owners.owners_of(result.file)) if owners else ()
            cases[test_id] = TestCase(
                id=test_id,
                repository_id=repository.id,
                name=result.name,
                classname=result.classname,
                parent=result.parent,
                file=result.file,
                variant=metadata.variant,
                status=TestStatus.HEALTHY,
                status_reason=NO_MONITOR_ACTIVE,
                status_at=now,
                first_seen_at=now,
                last_seen_at=now,
                codeowners=owners_by_file[result.file],
            )
    return identified, cases


class IngestService:
    def __init__(
        self,
        unit_of_work: UnitOfWorkFactory,
        *,
        parse: ReportParser,
        owners: OwnersSource,
        detector: Detector,
        clock: Clock,
        new_id: IdFactory,
        telemetry: Telemetry | None = None,
    ) -> None:
        self._telemetry = telemetry or Telemetry()
        self._unit_of_work = unit_of_work
        self._parse = parse
        self._owners = owners
        self._detector = detector
        self._clock = clock
        self._new_id = new_id

    def upload(
        self, org_id: OrgId, org_slug: str, metadata: UploadMetadata, files: Sequence[ReportFile]
    ) -> UploadSummary:
        try:
            summary = self._upload(org_id, org_slug, metadata, files)
        except KeepgreenError:
            self._telemetry.upload_refused()
            raise
        self._telemetry.upload_stored(
            size_bytes=sum(len(report.data) for report in files),
            results=summary.results,
            passed=summary.passed,
            failed=summary.failed,
            skipped=summary.skipped,
        )
        return summary

    def _upload(
        self, org_id: OrgId, org_slug: str, metadata: UploadMetadata, files: Sequence[ReportFile]
    ) -> UploadSummary:
        if not files:
            raise InvalidInput("missing_file", "file: an upload needs at least one JUnit report")
        parsed = self._read(files)
        with self._unit_of_work() as uow:
            repository = find_repository(uow, org_id, metadata.repo)
            owners = (
                self._owners.from_text(metadata.codeowners)
                if metadata.codeowners is not None
                else self._owners.from_repository(repository)
            )
            summary = self._store(uow, repository, org_slug, metadata, parsed, owners)
            uow.commit()
        log.info(
            "upload stored",
            repo=str(repository.ref),
            sha=metadata.commit_sha,
            upload=summary.upload_id,
            files=summary.files,
            results=summary.results,
            failed=summary.failed,
            infrastructure_failure=summary.excluded_as_infrastructure_failure,
        )
        return summary

    def _read(self, files: Sequence[ReportFile]) -> list[tuple[str, list[_Kept]]]:
        """Every report's results, read against the upload's limits before anything is stored."""
        parsed: list[tuple[str, list[_Kept]]] = []
        total = text = 0
        for report in files:
            # The budget is the upload's: reading stops at its first result past the limit,
            # whichever report that is in, so an oversized upload costs no more than a full one.
            remaining = MAX_RESULTS_PER_UPLOAD - total
            try:
                results = self._parse(report.filename, report.data, max_results=remaining)
            except ResultLimitReached:
                raise InvalidInput(
                    "too_many_results",
                    f"file {report.filename}: the upload holds more than "
                    f"{MAX_RESULTS_PER_UPLOAD:,} results (runs of tests, reruns included), the "
                    "limit per upload; send its reports in several uploads",
                ) from None
            total += len(results)
            kept = [_kept(result) for result in results]
            del results  # the failure bodies go now, before the next report is read
            text += sum(item.text_chars() for item in kept)
            if text > MAX_TEXT_PER_UPLOAD:
                raise InvalidInput(
                    "too_much_text",
                    f"file {report.filename}: the results of the upload hold more than "
                    f"{MAX_TEXT_PER_UPLOAD // (1024 * 1024)} Mi characters of names and failure "
                    "text, the limit per upload; send its reports in several uploads",
                )
            parsed.append((report.filename, kept))
        return parsed

    def _store(
        self,
        uow: UnitOfWork,
        repository: Repository,
        org_slug: str,
        metadata: UploadMetadata,
        parsed: Sequence[tuple[str, list[_Kept]]],
        owners: Owners | None,
    ) -> UploadSummary:
        store = uow.flaky
        store.lock_repository(repository.id)
        now = self._clock()
        settings = store.settings(repository.id)
        identified, cases = _identify(repository, org_slug, metadata, parsed, owners, now=now)
        final = final_outcomes(identified)
        counted = Counter(final.values())
        excluded = is_infrastructure_failure(
            counted, share=settings.monitors.infrastructure_failure_share
        )
        upload = UploadRecord(
            id=self._new_id(),
            repository_id=repository.id,
            commit_sha=metadata.commit_sha,
            branch=metadata.branch,
            pr_number=metadata.pr_number,
            job_url=metadata.job_url,
            run_id=metadata.run_id,
            variant=metadata.variant,
            received_at=now,
            files=len(parsed),
            tests=len(final),
            results=len(identified),
            failed=counted[Outcome.FAILED],
            skipped=counted[Outcome.SKIPPED],
            excluded=excluded,
        )
        store.add_upload(upload)
        store.ensure_tests(repository.id, list(cases.values()), seen_at=now)
        store.add_results(
            upload,
            [
                ResultRecord(
                    test_case_id=item.test_id,
                    outcome=item.result.outcome.value,
                    attempt=item.result.attempt,
                    duration_ms=item.result.duration_ms,
                    summary=item.summary,
                )
                for item in identified
            ],
        )
        if not excluded:
            self._roll_up(store, upload, identified, now)
            # Only these can change status: a new failure, a commit now mixed, or a test
            # already unhealthy (a pass may resolve it). A healthy test that passed cannot.
            touched = {item.test_id for item in identified if item.result.outcome is Outcome.FAILED}
            touched |= store.mixed_on_commit(repository.id, list(cases), metadata.commit_sha)
            touched |= set(store.unhealthy_ids(repository.id)) & set(cases)
            self._detector.reevaluate(store, repository.id, settings.monitors, touched, now=now)
        failed_ids = {test_id for test_id, outcome in final.items() if outcome is Outcome.FAILED}
        quarantined = store.quarantined_ids(repository.id, settings, failed_ids)
        return UploadSummary(
            upload_id=upload.id,
            files=upload.files,
            tests=upload.tests,
            results=upload.results,
            passed=counted[Outcome.PASSED],
            failed=upload.failed,
            skipped=upload.skipped,
            excluded_as_infrastructure_failure=excluded,
            quarantine_enabled=settings.quarantine.enabled,
            failures=tuple(
                FailedTest(
                    test_id=test_id,
                    name=cases[test_id].name,
                    classname=cases[test_id].classname,
                    parent=cases[test_id].parent,
                    file=cases[test_id].file,
                    quarantined=test_id in quarantined,
                )
                for test_id in sorted(failed_ids, key=lambda test_id: cases[test_id].name)
            ),
        )

    @staticmethod
    def _roll_up(
        store: FlakyStore,
        upload: UploadRecord,
        identified: Sequence[_Identified],
        now: datetime,
    ) -> None:
        runs: Counter[str] = Counter()
        failures: Counter[str] = Counter()
        passes: Counter[str] = Counter()
        summary_counts: dict[tuple[str, str], tuple[str, int]] = {}
        for item in identified:
            outcome = item.result.outcome
            if outcome is Outcome.SKIPPED:
                continue
            runs[item.test_id] += 1
            if outcome is Outcome.PASSED:
                passes[item.test_id] += 1
                continue
            failures[item.test_id] += 1
            summary = item.summary or "(no failure message)"
            key = (item.test_id, summary_key(summary))
            previous = summary_counts.get(key, (summary, 0))
            summary_counts[key] = (summary, previous[1] + 1)
        hour, day = _hour(now), _day(now)
        store.add_to_rollups(
            upload.repository_id,
            [
                HourDelta(test_id, hour, upload.branch, runs[test_id], failures[test_id], now)
                for test_id in runs
            ],
            [
                CommitDelta(
                    test_id,
                    upload.commit_sha,
                    upload.branch,
                    upload.pr_number,
                    passes[test_id],
                    failures[test_id],
                    now,
                )
                for test_id in runs
            ],
            [
                FailureDelta(test_id, day, key, summary, count, now)
                for (test_id, key), (summary, count) in summary_counts.items()
            ],
        )


__all__ = [
    "MAX_RESULTS_PER_UPLOAD",
    "FailedTest",
    "IngestService",
    "Owners",
    "OwnersSource",
    "ReportFile",
    "ReportParser",
    "ResultLimitReached",
    "UploadMetadata",
    "UploadSummary",
]
