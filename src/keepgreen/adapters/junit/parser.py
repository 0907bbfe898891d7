"""JUnit XML reports to CaseResults, read the way Trunk's uploader reads them (field notes §1.4).

The tree is walked here rather than through junitparser: iterating a junitparser suite flattens
the cases of its nested suites into it, which loses the innermost enclosing suite, a part of each
test's identity; and lxml alone is one dependency less to keep hardened.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import NamedTuple

from keepgreen.adapters.junit.document import (
    MAX_REPORT_BYTES,
    MAX_TEST_CASES,
    ReportError,
    XmlElement,
    count_document,
    report_bytes,
    stream_document,
)
from keepgreen.core.flaky.results import MAX_DETAIL_CHARS, MAX_FIELD_CHARS, CaseResult, Outcome

__all__ = ["MAX_REPORT_BYTES", "ReportError", "TooManyResults", "parse_report"]

_FAILURE_TAGS = ("failure", "error")
# Surefire's extra runs of one test: `rerun*` when every run failed, `flaky*` when one passed.
_RERUN_TAGS = ("rerunFailure", "rerunError", "flakyFailure", "flakyError")


class TooManyResults(ReportError):
    """The report holds more results than the caller's budget; reading stopped at the first
    one past it.
    """

    def __init__(self, filename: str, budget: int) -> None:
        super().__init__(filename, f"more than {budget:,} results")
        self.budget = budget


def parse_report(filename: str, data: bytes, *, max_results: int | None = None) -> list[CaseResult]:
    """Every attempt of every named testcase of one report, in document order.

    `data` is the report as uploaded, plain or gzip (told apart by its first bytes, not by
    `filename`, which only names the report in errors). Raises TooManyResults at the first
    result past `max_results`, without reading the rest, and ReportError when the report as a
    whole cannot be read. Smaller faults cost only what they spoil: a testcase without a name
    is skipped, and a `time` or `timestamp` that does not parse becomes None.
    """
    data = report_bytes(filename, data)
    if max_results is None:
        max_results = sys.maxsize
    if _may_hold_more(data, max_results):
        # Counted first without building a result, so that an oversized report is refused at
        # the speed of the parser alone (building results takes four times as long).
        _count_results(filename, data, max_results)
    walk = _Walk()
    for event, element in stream_document(filename, data):
        if event == "start":
            walk.start(element)
        elif walk.end(element) > max_results:
            raise TooManyResults(filename, max_results)
    return walk.results


_RESULT_MARKS = tuple(f"<{tag}".encode() for tag in ("testcase", *_RERUN_TAGS))


def _may_hold_more(data: bytes, budget: int) -> bool:
    """Whether the report may hold more testcases than MAX_TEST_CASES or more results than the
    budget: the count of their opening tags bounds both, and takes milliseconds.
    """
    test_cases = data.count(_RESULT_MARKS[0])
    return (
        test_cases > MAX_TEST_CASES
        or test_cases + sum(data.count(mark) for mark in _RESULT_MARKS[1:]) > budget
    )


def _count_results(filename: str, data: bytes, budget: int) -> None:
    """Counts testcases and results as the walk finds them, building none; raises ReportError
    past MAX_TEST_CASES and TooManyResults past the budget.
    """
    count_document(filename, data, _ResultCounter(filename, budget))


class _ResultCounter:
    """A parser target counting what the walk would read (see _Walk for which elements)."""

    def __init__(self, filename: str, budget: int) -> None:
        self.filename = filename
        self.budget = budget
        # Per open element: may its children be testcases (it is the root or a suite in one)?
        self.holds_cases: list[bool] = []
        self.case_depth = 0  # the depth of the testcase being read, 0 outside one
        self.named = False
        self.test_cases = 0
        self.results = 0

    def start(self, tag: str, attrib: Mapping[str, str]) -> None:
        holds_cases = self.holds_cases
        depth = len(holds_cases) + 1
        in_suite = holds_cases[-1] if holds_cases else True
        if tag == "testcase":
            self.test_cases += 1
            if self.test_cases > MAX_TEST_CASES:
                raise ReportError(self.filename, f"more than {MAX_TEST_CASES:,} test cases")
            if in_suite:
                self.case_depth, self.named = depth, _field(attrib.get("name")) is not None
                self.results += self.named
        elif self.named and self.case_depth and depth == self.case_depth + 1:
            self.results += tag in _RERUN_TAGS
        if self.results > self.budget:
            raise TooManyResults(self.filename, self.budget)
        holds_cases.append(in_suite and tag in ("testsuite", "testsuites"))

    def end(self, _tag: str) -> None:
        if len(self.holds_cases) == self.case_depth:
            self.case_depth = 0
        self.holds_cases.pop()

    def close(self) -> int:
        return self.results


# The records below are NamedTuples, not frozen dataclasses: a report holds up to 200,000
# testcases, and a frozen dataclass takes several times as long to build.


class _Suite(NamedTuple):
    """What a testcase takes from its innermost enclosing testsuite."""

    name: str | None
    timestamp: datetime | None  # the nearest enclosing suite's that parses


_NO_SUITE = _Suite(name=None, timestamp=None)


class _Evidence(NamedTuple):
    """What one failure, error, skip or rerun element says."""

    message: str | None
    detail: str | None


class _Attempt(NamedTuple):
    """One run of a testcase, before it is numbered."""

    outcome: Outcome
    evidence: _Evidence | None
    duration_ms: int | None
    timestamp: datetime | None


class _Identity(NamedTuple):
    """The fields every attempt of one testcase shares."""

    name: str
    classname: str | None
    parent: str | None
    file: str | None
    custom_id: str | None

    def result(self, attempt: _Attempt, *, index: int) -> CaseResult:
        return CaseResult(
            name=self.name,
            classname=self.classname,
            parent=self.parent,
            file=self.file,
            custom_id=self.custom_id,
            outcome=attempt.outcome,
            attempt=index,
            duration_ms=attempt.duration_ms,
            message=attempt.evidence.message if attempt.evidence is not None else None,
            detail=attempt.evidence.detail if attempt.evidence is not None else None,
            timestamp=attempt.timestamp,
        )


class _Case:
    """One testcase being read: its identity from its start tag, its runs from its children."""

    def __init__(self, identity: _Identity | None, element: XmlElement, suite: _Suite) -> None:
        self.identity = identity  # None: the testcase has no name and yields nothing
        self.timestamp = _timestamp(element.get("timestamp")) or suite.timestamp
        self.duration_ms = _duration_ms(element.get("time"))
        self.failure: _Evidence | None = None
        self.skipped: _Evidence | None = None
        self.reruns: list[_Attempt] = []
        # The `stackTrace` of the child being read, kept cut to size: the element itself is
        # dropped as soon as it was read.
        self.trace: str | None = None
        self.has_trace = False

    def child_ended(self, child: XmlElement) -> None:
        """Takes what a direct child says (the first `failure`/`error` and `skipped` count)."""
        tag = child.tag
        # Surefire's rerun and flaky elements hold the trace in a `stackTrace` child; the
        # others hold it as their own text (CDATA included).
        detail = self.trace if self.has_trace else _block(child.text)
        self.trace, self.has_trace = None, False
        if tag in _RERUN_TAGS:
            self.reruns.append(
                _Attempt(
                    Outcome.FAILED,
                    _evidence(child, detail),
                    # Surefire writes neither on reruns; cargo-nextest (quick-junit) writes both.
                    duration_ms=_duration_ms(child.get("time")),
                    timestamp=_timestamp(child.get("timestamp")) or self.timestamp,
                )
            )
        elif tag in _FAILURE_TAGS and self.failure is None:
            # The first says why (pytest adds teardown errors after it).
            self.failure = _evidence(child, detail)
        elif tag == "skipped" and self.skipped is None:
            self.skipped = _evidence(child, detail)

    def grandchild_ended(self, grandchild: XmlElement) -> None:
        if grandchild.tag == "stackTrace" and not self.has_trace:
            self.trace, self.has_trace = _block(grandchild.text), True

    def result_count(self) -> int:
        return 0 if self.identity is None else 1 + len(self.reruns)

    def results(self) -> list[CaseResult]:
        """One result per run the testcase records, in the order they ran."""
        if self.identity is None:
            return []
        if self.failure is not None:
            # Every run failed. `failure` (or `error`) is the first run and the testcase's time
            # is its time; the reruns came after it.
            first = _Attempt(Outcome.FAILED, self.failure, self.duration_ms, self.timestamp)
            attempts = [first, *self.reruns]
        else:
            # The flaky runs failed first; the run the testcase itself describes came last.
            outcome = Outcome.PASSED if self.skipped is None else Outcome.SKIPPED
            last = _Attempt(outcome, self.skipped, self.duration_ms, self.timestamp)
            attempts = [*self.reruns, last]
        identity = self.identity
        return [identity.result(attempt, index=index) for index, attempt in enumerate(attempts)]


class _Walk:
    """Follows the events of one report, and collects results testcase by testcase.

    Only the direct children of the root and of the suites reached from it are suites and
    testcases; a `testsuites` below the root only groups, it is no suite of its own. Elements
    anywhere else (a testcase in a testcase, or in `properties`) are not read.
    """

    def __init__(self) -> None:
        self.results: list[CaseResult] = []
        # One entry per open element: the suite it opens (or continues), or None once the walk
        # is outside the suites.
        self.suites: list[_Suite | None] = []
        self.case: _Case | None = None
        self.case_depth = 0

    def start(self, element: XmlElement) -> None:
        depth = len(self.suites) + 1
        outer = self.suites[-1] if self.suites else _NO_SUITE
        tag = element.tag
        if outer is None or self.case is not None:
            self.suites.append(None)
        elif tag == "testsuite":
            self.suites.append(
                _Suite(
                    name=_field(element.get("name")),
                    timestamp=_timestamp(element.get("timestamp")) or outer.timestamp,
                )
            )
        elif tag == "testsuites":
            self.suites.append(outer)
        elif tag == "testcase":
            self.suites.append(None)
            self.case, self.case_depth = _Case(_identity(element, outer), element, outer), depth
        else:
            self.suites.append(None)

    def end(self, element: XmlElement) -> int:
        """Reads an element at its end; answers how many results the report has so far,
        counting those of the testcase being read (one per rerun, and its own run).
        """
        depth = len(self.suites)
        self.suites.pop()
        case = self.case
        if case is None:
            return len(self.results)
        if depth == self.case_depth:
            self.results.extend(case.results())
            self.case = None
            return len(self.results)
        if depth == self.case_depth + 1:
            case.child_ended(element)
        elif depth == self.case_depth + 2:
            case.grandchild_ended(element)
        return len(self.results) + case.result_count()


def _identity(case: XmlElement, suite: _Suite) -> _Identity | None:
    name = _field(case.get("name"))
    if name is None:
        return None  # nothing to identify it by; the rest of the report still counts
    return _Identity(
        name=name,
        classname=_field(case.get("classname")),
        parent=suite.name,
        file=_field(case.get("file")) or _field(case.get("filepath")),
        custom_id=_field(case.get("id")),
    )


def _evidence(element: XmlElement, detail: str | None) -> _Evidence:
    message = _field(element.get("message")) or _first_line(detail)
    return _Evidence(message=message, detail=detail)


def _field(value: str | None) -> str | None:
    """An attribute as kept: None when absent or blank, else cut to MAX_FIELD_CHARS."""
    if value is None or not value.strip():
        return None
    return value[:MAX_FIELD_CHARS]


_LEADING_BLANK_LINES = re.compile(r"\A\s*\n")
_FIRST_LINE = re.compile(r"\S[^\r\n]*")


def _block(text: str | None) -> str | None:
    """A failure body without the blank lines around it, cut to MAX_DETAIL_CHARS."""
    if text is None:
        return None
    # Indentation of the first line is kept: it is part of Go's and pytest's output.
    kept = _LEADING_BLANK_LINES.sub("", text, count=1).rstrip()
    return kept[:MAX_DETAIL_CHARS] or None


def _first_line(text: str | None) -> str | None:
    if text is None:
        return None
    line = _FIRST_LINE.search(text)
    return line.group().rstrip()[:MAX_FIELD_CHARS] if line else None


# Surefire formats times with Locale.ENGLISH grouping ("1,234.5"); a few tools write the
# current locale's decimal comma ("0,25"). A lone comma before exactly three digits ("1,500")
# reads as grouping, as Surefire means it.
_GROUPED_SECONDS = re.compile(r"\d{1,3}(,\d{3})+(\.\d*)?")
_DECIMAL_COMMA_SECONDS = re.compile(r"\d+,\d+")
_MAX_SECONDS = 366 * 24 * 3600  # longer is a broken clock, and would not fit a sane column


def _duration_ms(value: str | None) -> int | None:
    if value is None:
        return None
    text = value.strip()
    if _GROUPED_SECONDS.fullmatch(text):
        text = text.replace(",", "")
    elif _DECIMAL_COMMA_SECONDS.fullmatch(text):
        text = text.replace(",", ".")
    try:
        seconds = float(text)
    except ValueError:
        return None
    if not math.isfinite(seconds) or not 0 <= seconds <= _MAX_SECONDS:
        return None
    return round(seconds * 1000)


_MAX_TIMESTAMP_CHARS = 64


def _timestamp(value: str | None) -> datetime | None:
    """An ISO 8601 instant in UTC; without an offset it is taken as UTC already."""
    if value is None or len(value) > _MAX_TIMESTAMP_CHARS:
        return None
    try:
        parsed = datetime.fromisoformat(value.strip())
        # Gradle, jest-junit and the .NET loggers write local or UTC time without an offset;
        # UTC is the one reading that does not depend on where the server runs.
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    except (ValueError, OverflowError):
        return None
