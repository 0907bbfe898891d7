"""What one JUnit report says about one execution of one test case."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields, make_dataclass
from dataclasses import field as dataclass_field
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
    The identity fields are the ones Trunk's test id is computed from (field notes §1.4), as
    Trunk's parser reads them: trimmed, cut to MAX_IDENTITY_BYTES, None when empty.
    """

    name: str  # "" when the testcase has none (Trunk keeps such a testcase, named "")
    classname: str | None
    parent: str | None  # name of the outermost enclosing `testsuite`
    file: str | None  # `file`, else `filepath`, of the testcase, else of that suite
    custom_id: str | None  # `testcase@id` when present and not empty
    outcome: Outcome
    attempt: int = 0
    duration_ms: int | None = None
    message: str | None = None  # failure/error/skip message, or the first line of its text
    detail: str | None = None  # the failure body (stack trace), truncated
    timestamp: datetime | None = None


def _becomes_case_result(self: object) -> None:
    self.__class__ = CaseResult


# A report holds up to 200,000 results, and the __init__ dataclasses write for a frozen class
# (each field set through object.__setattr__) took 1.3 µs a result, as long as reading its
# testcase from the XML. A parser builds them with new_case_result instead: a mutable twin
# with the same slots, in the same order, is filled by plain assignments and then made a
# CaseResult by setting its class, which the identical layout allows. What comes out is a
# CaseResult like any other (frozen, equal, hashable, picklable), in a third of the time.
new_case_result: Callable[..., CaseResult] = make_dataclass(
    "_CaseResultDraft",
    [
        (field.name, field.type)
        if field.default is MISSING
        else (field.name, field.type, dataclass_field(default=field.default))
        for field in fields(CaseResult)
    ],
    slots=True,
    eq=False,
    repr=False,
    namespace={"__post_init__": _becomes_case_result},
)

# Limits a parser applies to the text it keeps.
MAX_FIELD_CHARS = 1000  # a message (Trunk's validator flags fields past 1000 characters)
MAX_DETAIL_CHARS = 8000  # a failure body
# Trunk's parser trims each attribute and cuts it to 8000 bytes of UTF-8 (at a character
# boundary) before the identity fields go into the test id; so does ours, for the same ids.
MAX_IDENTITY_BYTES = 8000
