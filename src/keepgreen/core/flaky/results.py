"""What one JUnit report says about one execution of one test case."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


class Outcome(StrEnum):
    """How one attempt of a test ended."""

    PASSED = "passed"  # ran and succeeded
    FAILED = "failed"  # a `failure` or an `error` (both mean the test did not pass)
    SKIPPED = "skipped"  # not run, or ignored/disabled; never counts as a run


@dataclass(frozen=True, slots=True)
class CaseResult:
    """One attempt of one `testcase`.

    A testcase with Surefire reruns gives several results with increasing `attempt`: a failed
    test with `rerunFailure`s is attempt 0 failed then reruns 1..n failed; a passed test with
    `flakyFailure`s is the flaky attempts 0..n-1 failed then attempt n passed.
    The identity fields are the ones Trunk's test id is computed from (field notes §1.4).
    """

    name: str
    classname: str | None
    parent: str | None  # name of the enclosing `testsuite`
    file: str | None  # `file`, else `filepath`
    custom_id: str | None  # `testcase@id` when present and not empty
    outcome: Outcome
    attempt: int = 0
    duration_ms: int | None = None
    message: str | None = None  # failure/error/skip message, or the first line of its text
    detail: str | None = None  # the failure body (stack trace), truncated
    timestamp: datetime | None = None


# Limits a parser applies to the text it keeps (Trunk truncates fields at 1000 characters).
MAX_FIELD_CHARS = 1000
MAX_DETAIL_CHARS = 8000
