"""JUnit XML reports to CaseResults, read the way Trunk's uploader reads them (field notes §1.4).

The tree is walked here rather than through junitparser: iterating a junitparser suite flattens
the cases of its nested suites into it, which loses the innermost enclosing suite, a part of each
test's identity; and lxml alone is one dependency less to keep hardened.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import NamedTuple

from keepgreen.adapters.junit.document import (
    MAX_REPORT_BYTES,
    ReportError,
    XmlElement,
    load_document,
)
from keepgreen.core.flaky.results import MAX_DETAIL_CHARS, MAX_FIELD_CHARS, CaseResult, Outcome

__all__ = ["MAX_REPORT_BYTES", "ReportError", "parse_report"]

_FAILURE_TAGS = ("failure", "error")
# Surefire's extra runs of one test: `rerun*` when every run failed, `flaky*` when one passed.
_RERUN_TAGS = ("rerunFailure", "rerunError", "flakyFailure", "flakyError")


def parse_report(filename: str, data: bytes) -> list[CaseResult]:
    """Every attempt of every named testcase of one report, in document order.

    `data` is the report as uploaded, plain or gzip (told apart by its first bytes, not by
    `filename`, which only names the report in errors). Raises ReportError when the report as a
    whole cannot be read. Smaller faults cost only what they spoil: a testcase without a name is
    skipped, and a `time` or `timestamp` that does not parse becomes None.
    """
    root = load_document(filename, data)
    walk = _Walk()
    if root.tag == "testsuite":
        walk.suite(root, _NO_SUITE)
    else:
        walk.children(root, _NO_SUITE)
    return walk.results


# The records below are NamedTuples, not frozen dataclasses: a report holds up to 200,000
# testcases, and a frozen dataclass takes several times as long to build.


class _Suite(NamedTuple):
    """What a testcase takes from its innermost enclosing testsuite."""

    name: str | None
    timestamp: datetime | None  # the nearest enclosing suite's that parses


_NO_SUITE = _Suite(name=None, timestamp=None)


class _Walk:
    """Collects results suite by suite; nesting is bounded by the document's depth check."""

    def __init__(self) -> None:
        self.results: list[CaseResult] = []

    def suite(self, element: XmlElement, outer: _Suite) -> None:
        own = _Suite(
            name=_field(element.get("name")),
            timestamp=_timestamp(element.get("timestamp")) or outer.timestamp,
        )
        self.children(element, own)

    def children(self, element: XmlElement, suite: _Suite) -> None:
        for child in element.iterchildren("testcase", "testsuite", "testsuites"):
            if child.tag == "testcase":
                self.results.extend(_case_results(child, suite))
            elif child.tag == "testsuite":
                self.suite(child, suite)
            else:
                # A `testsuites` below the root only groups; it is no suite of its own.
                self.children(child, suite)


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


def _case_results(case: XmlElement, suite: _Suite) -> list[CaseResult]:
    """One result per run the testcase records, in the order they ran."""
    name = _field(case.get("name"))
    if name is None:
        return []  # nothing to identify it by; the rest of the report still counts
    identity = _Identity(
        name=name,
        classname=_field(case.get("classname")),
        parent=suite.name,
        file=_field(case.get("file")) or _field(case.get("filepath")),
        custom_id=_field(case.get("id")),
    )
    timestamp = _timestamp(case.get("timestamp")) or suite.timestamp
    duration_ms = _duration_ms(case.get("time"))
    # One pass over the children: most testcases have none, and lxml's tag filters cost more
    # than the loop.
    failure: XmlElement | None = None
    skipped: XmlElement | None = None
    reruns: list[_Attempt] = []
    for child in case.iterchildren():
        if child.tag in _RERUN_TAGS:
            reruns.append(
                _Attempt(
                    Outcome.FAILED,
                    _evidence(child),
                    # Surefire writes neither on reruns; cargo-nextest (quick-junit) writes both.
                    duration_ms=_duration_ms(child.get("time")),
                    timestamp=_timestamp(child.get("timestamp")) or timestamp,
                )
            )
        elif child.tag in _FAILURE_TAGS and failure is None:
            failure = child  # the first says why (pytest adds teardown errors after it)
        elif child.tag == "skipped" and skipped is None:
            skipped = child
    if failure is not None:
        # Every run failed. `failure` (or `error`) is the first run and the testcase's time is
        # its time; the reruns came after it.
        first = _Attempt(Outcome.FAILED, _evidence(failure), duration_ms, timestamp)
        attempts = [first, *reruns]
    else:
        # The flaky runs failed first; the run the testcase itself describes came last.
        if skipped is None:
            last = _Attempt(Outcome.PASSED, None, duration_ms, timestamp)
        else:
            last = _Attempt(Outcome.SKIPPED, _evidence(skipped), duration_ms, timestamp)
        attempts = [*reruns, last]
    return [identity.result(attempt, index=index) for index, attempt in enumerate(attempts)]


def _evidence(element: XmlElement) -> _Evidence:
    # Surefire's rerun and flaky elements hold the trace in a `stackTrace` child; the others
    # hold it as their own text (CDATA included).
    trace = next(element.iterchildren("stackTrace"), None)
    detail = _block(trace.text if trace is not None else element.text)
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
