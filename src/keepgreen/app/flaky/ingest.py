"""Ingest: one upload of JUnit reports becomes test cases, failed results, roll-ups and statuses.

Every report is read and tallied per test before anything is written, and everything is
written in one short transaction: a bad report refuses the whole upload (400 naming the file),
nothing half-stored. A retried upload (the same key, or the same reports of the same run) is
stored once and answered as it was the first time.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

import structlog

from keepgreen.app.errors import InvalidInput, KeepgreenError, RetryableConflict
from keepgreen.app.flaky.detection import Detector
from keepgreen.app.flaky.settings import FlakySettings
from keepgreen.app.flaky.store import FlakyStore, UploadRecord
from keepgreen.app.flaky.tally import Tally, TestTally, cyclic_gc_paused
from keepgreen.app.lookup import find_repository
from keepgreen.app.ports import Clock, IdFactory, UnitOfWork, UnitOfWorkFactory
from keepgreen.app.telemetry import Telemetry
from keepgreen.core.flaky.ids import repo_full_name
from keepgreen.core.flaky.model import TestCase
from keepgreen.core.flaky.monitors import PassOnRetry, pass_may_change, reading_branch
from keepgreen.core.flaky.results import CaseResult, Outcome
from keepgreen.core.ids import OrgId
from keepgreen.core.model import RepoRef, Repository

# Infrastructure protection needs a sample: one failing test alone is not an outage.
MIN_TESTS_FOR_INFRASTRUCTURE_CHECK = 10
# Results (runs of tests, reruns included) per upload: a larger job splits its reports into
# several uploads (the CLI does). Reading stops at the first result past the limit.
MAX_RESULTS_PER_UPLOAD = 200_000
# Characters of text the results of one upload keep: names, paths and failure summaries (a
# failure's body is summarised as its report is read, then dropped). Each field is cut to its
# limit while reading, but gzip makes a few hundred thousand distinct, nearly equal names cheap
# to send; this bounds what they cost to hold, while a real upload at the result limit, with
# Java-length names, keeps about 40 million.
MAX_TEXT_PER_UPLOAD = 128 * 1024 * 1024

# Times one upload's transaction is tried when the database breaks a deadlock with another.
STORE_ATTEMPTS = 3

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
    idempotency_key: str | None = None  # the client's: the same key is stored once


class ReportFormat(StrEnum):
    """What a report file holds, which decides the parser that reads it."""

    JUNIT = "junit"  # JUnit XML, plain or gzip: every multipart upload, and a bundle's reports
    # A protobuf TestReport, the `internal.bin` of Trunk's uploader: a bundle's results when it
    # carries no JUnit report (RSpec's plugin writes only this).
    TEST_REPORT = "test_report"


@dataclass(frozen=True, slots=True)
class ReportFile:
    filename: str
    data: bytes
    format: ReportFormat = ReportFormat.JUNIT


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
    repeated: bool = False  # the same upload was stored before: this is that one's answer


def is_infrastructure_failure(outcomes: Counter[Outcome], *, share: float) -> bool:
    """At least `share` of the tests that ran failed, and enough ran to call it an outage."""
    ran = outcomes[Outcome.PASSED] + outcomes[Outcome.FAILED]
    return ran >= MIN_TESTS_FOR_INFRASTRUCTURE_CHECK and outcomes[Outcome.FAILED] >= share * ran


def upload_key(metadata: UploadMetadata, files: Sequence[ReportFile]) -> str:
    """What makes two uploads the same one: the key the client sent, else the same commit,
    branch, variant, run, job and PR with byte-for-byte the same reports in the same order.
    A CI step that retries an upload the server already stored is then stored once.
    """
    digest = hashlib.sha256()
    if metadata.idempotency_key is not None:
        digest.update(b"key\0" + metadata.idempotency_key.encode())
        return digest.hexdigest()
    fields = (
        metadata.commit_sha,
        metadata.branch,
        metadata.variant,
        metadata.run_id or "",
        metadata.job_url or "",
        str(metadata.pr_number or ""),
    )
    digest.update("\0".join(("files", *fields)).encode())
    for report in files:
        digest.update(b"\0" + hashlib.sha256(report.data).digest())
    return digest.hexdigest()


class IngestService:
    def __init__(
        self,
        unit_of_work: UnitOfWorkFactory,
        *,
        parse: ReportParser,
        parse_test_report: ReportParser | None = None,
        owners: OwnersSource,
        detector: Detector,
        clock: Clock,
        new_id: IdFactory,
        telemetry: Telemetry | None = None,
    ) -> None:
        self._telemetry = telemetry or Telemetry()
        self._unit_of_work = unit_of_work
        self._parsers = {ReportFormat.JUNIT: parse}
        if parse_test_report is not None:
            self._parsers[ReportFormat.TEST_REPORT] = parse_test_report
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
        with self._unit_of_work(read_only=True) as uow:
            repository = find_repository(uow, org_id, metadata.repo)
        # The cycle collector waits until the tally is gone: held while the upload is stored,
        # the first collection after the pause would scan all of it in one go (a 200,000-test
        # upload: a few hundred ms in which no other request of the process runs).
        with cyclic_gc_paused():
            summary = self._read_and_store(org_slug, repository, metadata, files)
        log.info(
            "upload stored" if not summary.repeated else "upload already stored",
            repo=str(repository.ref),
            sha=metadata.commit_sha,
            upload=summary.upload_id,
            files=summary.files,
            results=summary.results,
            failed=summary.failed,
            infrastructure_failure=summary.excluded_as_infrastructure_failure,
        )
        return summary

    def _read_and_store(
        self,
        org_slug: str,
        repository: Repository,
        metadata: UploadMetadata,
        files: Sequence[ReportFile],
    ) -> UploadSummary:
        # Reading, identifying and tallying happen before the write transaction opens, and so
        # do the owners (which may read the repository): the transaction holds only writes.
        ref = repository.ref
        tally = self._read(files, org_slug, repo_full_name(ref.host, ref.owner, ref.name), metadata)
        owners = (
            self._owners.from_text(metadata.codeowners)
            if metadata.codeowners is not None
            else self._owners.from_repository(repository)
        )
        codeowners = _owners_by_file(tally, owners)
        key = upload_key(metadata, files)
        for attempt in range(1, STORE_ATTEMPTS + 1):
            try:
                with self._unit_of_work() as uow:
                    summary = self._store(
                        uow, repository, metadata, key, len(files), tally, codeowners
                    )
                    uow.commit()
                break
            except RetryableConflict:
                # Two uploads met on the same rows in an order the database refused (a
                # deadlock it broke): the whole transaction was rolled back; try it again.
                if attempt == STORE_ATTEMPTS:
                    raise
                log.info("upload retried after a write conflict", attempt=attempt)
        return summary

    def _read(
        self,
        files: Sequence[ReportFile],
        org_slug: str,
        repo_name: str,
        metadata: UploadMetadata,
    ) -> Tally:
        """Every report's results, tallied per test and read against the upload's limits."""
        tally = Tally(org_slug, repo_name, metadata.variant)
        for report in files:
            # The budget is the upload's: reading stops at its first result past the limit,
            # whichever report that is in, so an oversized upload costs no more than a full one.
            remaining = MAX_RESULTS_PER_UPLOAD - tally.results
            parse = self._parsers.get(report.format)
            if parse is None:
                raise InvalidInput(
                    "invalid_report", f"file {report.filename}: {report.format} is not read here"
                )
            try:
                results = parse(report.filename, report.data, max_results=remaining)
            except ResultLimitReached:
                raise InvalidInput(
                    "too_many_results",
                    f"file {report.filename}: the upload holds more than "
                    f"{MAX_RESULTS_PER_UPLOAD:,} results (runs of tests, reruns included), the "
                    "limit per upload; send its reports in several uploads",
                ) from None
            tally.add(results)
            del results  # the failure bodies go now, before the next report is read
            if tally.text_chars > MAX_TEXT_PER_UPLOAD:
                raise InvalidInput(
                    "too_much_text",
                    f"file {report.filename}: the results of the upload hold more than "
                    f"{MAX_TEXT_PER_UPLOAD // (1024 * 1024)} Mi characters of names and failure "
                    "text, the limit per upload; send its reports in several uploads",
                )
        return tally

    def _store(
        self,
        uow: UnitOfWork,
        repository: Repository,
        metadata: UploadMetadata,
        key: str,
        files: int,
        tally: Tally,
        codeowners: Mapping[str | None, tuple[str, ...]],
    ) -> UploadSummary:
        store = uow.flaky
        now = self._clock()
        settings = store.settings(repository.id)
        tests = tally.tests
        counted = Counter(test.final for test in tests.values())
        excluded = is_infrastructure_failure(
            counted, share=settings.monitors.infrastructure_failure_share
        )
        failed_ids = tuple(
            sorted(
                (test.test_id for test in tests.values() if test.final is Outcome.FAILED),
                key=lambda test_id: (tests[test_id].name, test_id),
            )
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
            files=files,
            tests=len(tests),
            results=tally.results,
            failed=counted[Outcome.FAILED],
            skipped=counted[Outcome.SKIPPED],
            excluded=excluded,
            upload_key=key,
            failed_tests=failed_ids,
        )
        earlier = store.claim_upload(upload)
        if earlier is not None:
            stored = store.tests(repository.id, earlier.failed_tests)
            return self._summary(store, earlier, settings, stored, repeated=True)
        if excluded:
            store.add_tests(upload, list(tests.values()), codeowners, roll_up=False)
            return self._summary(store, upload, settings, tests, repeated=False)
        # Only these can change status: a new failure, a commit now mixed, or an unhealthy
        # test whose active monitor a pass on this branch ends. A healthy test that passed
        # cannot. They are known before anything is written, so their rows are taken first,
        # in order (see add_tests).
        touched = {test.test_id for test in tests.values() if test.failures}
        touched |= store.failing_on_commit(repository.id, metadata.commit_sha) & tests.keys()
        unhealthy = (set(store.unhealthy_ids(repository.id)) & tests.keys()) - touched
        touched |= {
            test.id
            for test in store.tests(repository.id, unhealthy).values()
            if pass_may_change(settings.monitors, test.monitors, metadata.branch)
        }
        store.add_tests(
            upload,
            list(tests.values()),
            codeowners,
            roll_up=True,
            # Buckets per branch only while a monitor reads them (see FlakyStore.add_tests).
            by_branch=settings.monitors.bucket_hours > 0,
            hold=touched,
        )
        # A concurrent upload may have failed one of these tests on this commit meanwhile.
        mixed = store.mixed_on_commit(repository.id, metadata.commit_sha) & tests.keys()
        touched |= store.hold_tests(repository.id, mixed - touched)
        # Read again: an upload that committed while this one waited for its rows read the
        # clock later than `now`, and its results must not look as if from the future.
        evaluated_at = max(now, self._clock())
        # Only the monitors this upload gave something new to read run: those that read runs
        # on its branch, and pass-on-retry for the tests it made mixed on its commit. (A new
        # failure on a new commit of a feature branch changes no default monitor.)
        on_branch = reading_branch(settings.monitors, metadata.branch)
        for ids, refresh in (
            (touched & mixed, on_branch | {PassOnRetry.key}),
            (touched - mixed, on_branch),
        ):
            self._detector.reevaluate(
                store, repository.id, settings.monitors, ids, now=evaluated_at, refresh=refresh
            )
        return self._summary(store, upload, settings, tests, repeated=False)

    @staticmethod
    def _summary(
        store: FlakyStore,
        upload: UploadRecord,
        settings: FlakySettings,
        cases: Mapping[str, TestCase | TestTally],
        *,
        repeated: bool,
    ) -> UploadSummary:
        failed = upload.failed_tests
        quarantined = store.quarantined_ids(upload.repository_id, settings, failed)
        return UploadSummary(
            upload_id=upload.id,
            files=upload.files,
            tests=upload.tests,
            results=upload.results,
            passed=upload.tests - upload.failed - upload.skipped,
            failed=upload.failed,
            skipped=upload.skipped,
            excluded_as_infrastructure_failure=upload.excluded,
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
                for test_id in failed
                if test_id in cases
            ),
            repeated=repeated,
        )


def _owners_by_file(tally: Tally, owners: Owners | None) -> dict[str | None, tuple[str, ...]]:
    """Each file of the upload's tests with the owners CODEOWNERS gives it (none: empty)."""
    if owners is None:
        return {}
    files = {test.file for test in tally.tests.values()}
    return {file: tuple(owners.owners_of(file)) for file in files}


__all__ = [
    "MAX_RESULTS_PER_UPLOAD",
    "FailedTest",
    "IngestService",
    "Owners",
    "OwnersSource",
    "ReportFile",
    "ReportFormat",
    "ReportParser",
    "ResultLimitReached",
    "UploadMetadata",
    "UploadSummary",
]
