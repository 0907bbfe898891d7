"""A bundle's `internal.bin` (a protobuf TestReport) to CaseResults, as ingest reads JUnit.

Read only when a bundle carries no JUnit report: RSpec's plugin (and any tool writing Trunk's
format) records its results this way alone, with each retry an attempt and each quarantined
failure marked. The fields are the ones the uploader fills from a JUnit testcase, so a test
gets the id it would get from the same testcase in XML:

- identity: `name`, `classname`, `file`, `parent_name` (the suite) and `id` (the testcase's
  own id, the custom id of Trunk's hash; "" when none). Empty strings are absent fields.
- outcome: `status` SUCCESS, FAILURE or SKIPPED; an unspecified (or unknown) status is a test
  that did not run, read as skipped.
- attempt: `attempt_index` when set (0-based), else Bazel's attempt of the target, else the
  deprecated `attempt_number`. Retries of one test are its attempts, so a failure retried into
  a pass ends as a pass, and counts as flaky evidence on the commit.
- `is_quarantined` says the uploader quarantined a failure; it changes nothing here: a
  quarantined failure is a failure, the very evidence that keeps a test flaky.
- message and detail: `test_output` (message, text), else the deprecated
  `status_output_message`; duration from `started_at` and `finished_at`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from google.protobuf.message import DecodeError

from keepgreen.adapters.trunk.protos import TestReport, TestResult
from keepgreen.app.errors import InvalidInput
from keepgreen.app.flaky.ingest import ResultLimitReached
from keepgreen.core.flaky.results import CaseResult, Outcome

# What the JUnit parser keeps of a field and of a failure's body (Trunk cuts fields at 1000).
MAX_FIELD_CHARS = 1000
MAX_DETAIL_CHARS = 8000
_OUTCOMES = {1: Outcome.PASSED, 2: Outcome.FAILED, 3: Outcome.SKIPPED}
_MAX_ATTEMPT = 10_000  # more retries than any runner makes: a garbage number
_MAX_SECONDS = 366 * 24 * 3600  # a longer run is a broken clock (as the JUnit parser says)


def parse_test_report(filename: str, data: bytes, *, max_results: int) -> list[CaseResult]:
    """Every run of a TestReport (or of a lone TestResult, which older writers sent), in the
    order written. Raises InvalidInput naming the file when it is no such message, and
    ResultLimitReached when it holds more than `max_results` runs.
    """
    report: Any = TestReport()
    try:
        report.ParseFromString(data)
        results: Any = report.test_results
    except DecodeError:
        # Trunk's own reader falls back to a single TestResult the same way.
        single: Any = TestResult()
        try:
            single.ParseFromString(data)
        except DecodeError:
            raise InvalidInput(
                "invalid_report", f"file {filename}: not a TestReport (protobuf) Trunk writes"
            ) from None
        results = [single]
    if sum(len(result.test_case_runs) for result in results) > max_results:
        raise ResultLimitReached
    return [_case_result(run) for result in results for run in result.test_case_runs]


def _case_result(run: Any) -> CaseResult:
    message, detail = _evidence(run)
    started = _moment(run.started_at) if run.HasField("started_at") else None
    finished = _moment(run.finished_at) if run.HasField("finished_at") else None
    return CaseResult(
        name=run.name[:MAX_FIELD_CHARS],
        classname=_field(run.classname),
        parent=_field(run.parent_name),
        file=_field(run.file),
        custom_id=_field(run.id),
        outcome=_OUTCOMES.get(run.status, Outcome.SKIPPED),
        attempt=_attempt(run),
        duration_ms=_duration_ms(started, finished),
        message=message,
        detail=detail,
        # A run the uploader read without a time is stamped at the epoch: no time at all.
        timestamp=started if started is not None and started.timestamp() > 0 else None,
    )


def _attempt(run: Any) -> int:
    if run.HasField("attempt_index"):
        number = run.attempt_index.number
    elif run.HasField("bazel_run_information"):
        number = run.bazel_run_information.attempt_number
    else:
        number = run.attempt_number
    return number if 0 <= number <= _MAX_ATTEMPT else 0


def _evidence(run: Any) -> tuple[str | None, str | None]:
    """(message, detail): the short failure message and the full text with its trace."""
    output = run.test_output if run.HasField("test_output") else None
    legacy: str = run.status_output_message
    message = (output.message if output is not None else "") or _first_line(legacy)
    detail = (output.text if output is not None else "") or legacy
    return _field(message), _block(detail)


def _field(value: str | None) -> str | None:
    """A field as kept: None when empty or blank, else cut to MAX_FIELD_CHARS."""
    if value is None or not value.strip():
        return None
    return value[:MAX_FIELD_CHARS]


def _block(text: str) -> str | None:
    """A failure's body without the blank lines around it, cut to MAX_DETAIL_CHARS."""
    return text.strip("\r\n").rstrip()[:MAX_DETAIL_CHARS] or None


def _first_line(text: str) -> str | None:
    return next((line.strip() for line in text.splitlines() if line.strip()), None)


def _moment(stamp: Any) -> datetime | None:
    try:
        return datetime.fromtimestamp(stamp.seconds + stamp.nanos / 1e9, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _duration_ms(started: datetime | None, finished: datetime | None) -> int | None:
    if started is None or finished is None:
        return None
    seconds = (finished - started).total_seconds()
    return round(seconds * 1000) if 0 <= seconds <= _MAX_SECONDS else None
