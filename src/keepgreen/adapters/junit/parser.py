"""JUnit XML reports to CaseResults, with the test identity Trunk's uploader gives them.

Identity follows Trunk's parser (context/src/junit/parser.rs at the commit of the field notes):

- Every `testcase` element is a test, wherever it is, except one inside another testcase.
  `testsuites` elements only group, at any depth.
- `parent` is the name of the outermost open `testsuite`; nested suites add nothing to it.
- `file` is the testcase's `file`, else its `filepath`, else that outermost suite's `file`,
  else its `filepath`. An attribute that is there counts even when empty: `file=""` is no file,
  and stops the fallback (Trunk's parser keeps the empty value).
- Each attribute is trimmed and cut to MAX_IDENTITY_BYTES of UTF-8, as Trunk's parser does
  before it hashes them; what is then empty is None (the id reads None and "" alike).
- A testcase without a name is a test named "" (Trunk keeps it, and flags the report): it is
  kept, so that its failure counts (GoogleTest writes one for a failing SetUpTestSuite,
  Surefire 3 for a failing JUnit 5 @BeforeAll, Jest for `test('')`).
- Two differences stay, both in text XML forbids or normalises: libxml2 turns a raw tab or
  line break inside an attribute into a space, as XML says (Trunk's parser keeps it; tools
  write them as `&#10;`), and a forbidden character is U+FFFD here (see document.py).

Where Trunk's parser would lose a failure, this one keeps it:

- A `failure` or `error` directly in a `testsuite`, outside any testcase (Ant's formatter writes
  one when a class fails to initialise), is a failed result of its own. Trunk's parser drops
  it, so there is no id of Trunk's to follow; the identity chosen is stable and the suite's
  own: name and classname the suite's name, parent and file as for the suite's testcases.
- A testcase outside any suite is kept (with no parent), where Trunk's parser drops it.
- A testcase with a `failure` or `error` is failed whatever else it holds; Trunk's parser takes
  the first of `failure`, `error` and `skipped` as the status.

And a test that never ran is skipped, however its tool says so: a `skipped` or `ignored`
(TestNG) child, or a `status` or `result` attribute saying so (GoogleTest writes
`status="notrun" result="suppressed"` for DISABLED_ tests and `result="skipped"` for
GTEST_SKIP, CTest `status="notrun"` and `status="disabled"`). Trunk's parser reads none of the
attributes: it has such tests as passed.

Reruns (Surefire, and quick-junit for cargo-nextest) give one result per run: `rerunFailure` and
`rerunError` are failed runs after the testcase's own failed run; `flakyFailure` and
`flakyError` are failed runs before the one the testcase describes, which passed, even when
the testcase also has a `failure` (nextest's `flaky-result = "fail"`: quick-junit writes the
verdict as a `failure`, and the run it describes still passed).
"""

from __future__ import annotations

import email.utils
import re
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import NamedTuple

from keepgreen.adapters.junit.document import (
    DEPTH_PROBLEM,
    MAX_DEPTH,
    MAX_NODES,
    MAX_REPORT_BYTES,
    MAX_TEST_CASES,
    NODES_PROBLEM,
    TEST_CASES_PROBLEM,
    ReportError,
    read_document,
    report_bytes,
)
from keepgreen.core.flaky.results import (
    MAX_DETAIL_CHARS,
    MAX_FIELD_CHARS,
    MAX_IDENTITY_BYTES,
    CaseResult,
    Outcome,
    new_case_result,
)

__all__ = ["MAX_REPORT_BYTES", "ReportError", "TooManyResults", "parse_report"]

PASSED, FAILED, SKIPPED = Outcome.PASSED, Outcome.FAILED, Outcome.SKIPPED
_ROOTS = ("testsuites", "testsuite")
_FAILURE_TAGS = ("failure", "error")
_SKIP_TAGS = ("skipped", "ignored")
_RERUN_TAGS = ("rerunFailure", "rerunError")
_FLAKY_TAGS = ("flakyFailure", "flakyError")
_EVIDENCE_TAGS = frozenset((*_FAILURE_TAGS, *_SKIP_TAGS, *_RERUN_TAGS, *_FLAKY_TAGS))
# `status` and `result` values of a test that did not run (compared in lower case).
_NOT_RUN = frozenset(("notrun", "not_run", "disabled", "skipped", "skip", "ignored", "suppressed"))
# Text kept of one failure body or stack trace while it is read: enough for MAX_DETAIL_CHARS
# after blank lines are dropped, and no more however long the body is.
_CAPTURE_CHARS = 4 * MAX_DETAIL_CHARS


class TooManyResults(ReportError):
    """The report holds more results than the caller's budget; reading stopped at the first
    one past it.
    """

    def __init__(self, filename: str, budget: int) -> None:
        super().__init__(filename, f"more than {budget:,} results")
        self.budget = budget


def parse_report(filename: str, data: bytes, *, max_results: int | None = None) -> list[CaseResult]:
    """Every attempt of every testcase of one report, in document order.

    `data` is the report as uploaded, plain or gzip (told apart by its first bytes, not by
    `filename`, which only names the report in errors). Raises TooManyResults at the first
    result past `max_results`, and ReportError when the report as a whole cannot be read.
    Smaller faults cost only what they spoil: a `time` or `timestamp` that does not parse
    becomes None.
    """
    data = report_bytes(filename, data)
    budget = sys.maxsize if max_results is None else max_results
    return read_document(filename, data, lambda: _Reader(filename, budget))


class _Suite:
    """An open `testsuite`, with what its testcases take from it."""

    __slots__ = ("depth", "failure", "file", "name", "parent", "timestamp")

    def __init__(
        self,
        depth: int,
        name: str | None,
        *,
        parent: str | None,
        file: str | None,
        timestamp: datetime | None,
    ) -> None:
        self.depth = depth
        self.name = name
        self.parent = parent  # the outermost suite's name
        self.file = file  # the outermost suite's `file`, else `filepath`
        self.timestamp = timestamp  # the nearest suite's that parses
        self.failure: _Evidence | None = None  # its own first `failure` or `error`


_NO_SUITE = _Suite(0, None, parent=None, file=None, timestamp=None)


class _Text:
    """The text of one element, kept up to _CAPTURE_CHARS."""

    __slots__ = ("parts", "size")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.size = 0

    def block(self) -> str | None:
        return _block("".join(self.parts))


class _Evidence(NamedTuple):
    """What one failure, error, skip or rerun element says."""

    message: str | None
    detail: str | None


class _Run(NamedTuple):
    """One run of a testcase, before it is numbered."""

    outcome: Outcome
    evidence: _Evidence | None
    duration_ms: int | None
    timestamp: datetime | None


class _Children:
    """What the children of the testcase being read say; only testcases with children have
    one, the rest are read from their attributes alone.
    """

    __slots__ = (
        "description",
        "failure",
        "flaky",
        "grandchild_text",
        "runs",
        "skipped",
        "tag_and_attrib",
        "timestamp",
        "trace",
    )

    def __init__(self, timestamp: datetime | None) -> None:
        self.timestamp = timestamp  # the testcase's, for reruns without their own
        self.failure: _Evidence | None = None  # the first `failure` or `error`
        self.skipped: _Evidence | None = None  # the first `skipped` or `ignored`
        self.runs: list[_Run] = []  # reruns and flaky runs, in document order
        self.flaky = False  # whether any of them is a flaky run
        # The evidence child being read: its tag and attributes, its own text, the text of its
        # `stackTrace`, and where text inside a grandchild goes.
        self.tag_and_attrib: tuple[str, dict[str, str]] | None = None
        self.description = _Text()
        self.trace: _Text | None = None
        self.grandchild_text: _Text | None = None


class _Reader:
    """A parser target that reads one report into results as libxml2 parses it.

    Each testcase is read at its end tag, from the attributes kept at its start tag; only one
    with children (3 in 100 in a typical report) needs more.
    """

    __slots__ = (
        "_attrib",
        "_budget",
        "_case_depth",
        "_children",
        "_depth",
        "_failure_attrib",
        "_failure_depth",
        "_failure_text",
        "_filename",
        "_nodes",
        "_results",
        "_sink",
        "_suite",
        "_suites",
        "_testcases",
    )

    def __init__(self, filename: str, budget: int) -> None:
        self._filename = filename
        self._budget = budget
        self._results: list[CaseResult] = []
        self._depth = 0
        self._nodes = 0  # elements and attributes so far
        self._testcases = 0
        self._suites: list[_Suite] = []
        self._suite = _NO_SUITE  # the innermost open suite
        # The testcase being read: its depth (0 outside one), attributes and children.
        self._case_depth = 0
        self._attrib: dict[str, str] = {}
        self._children: _Children | None = None
        # Where text goes: the evidence being read, or nowhere.
        self._sink: _Text | None = None
        # A suite's own failure being read: its depth (0 outside one), attributes and text.
        self._failure_depth = 0
        self._failure_attrib: dict[str, str] = {}
        self._failure_text = _Text()

    def start(self, tag: str, attrib: dict[str, str]) -> None:
        depth = self._depth = self._depth + 1
        nodes = self._nodes = self._nodes + 1 + len(attrib)
        if depth > MAX_DEPTH or nodes > MAX_NODES:
            raise ReportError(self._filename, DEPTH_PROBLEM if depth > MAX_DEPTH else NODES_PROBLEM)
        case_depth = self._case_depth
        if case_depth:
            if depth == case_depth + 1:
                self._child_started(tag, attrib)
            else:
                self._inner_started(tag, depth - case_depth)
        elif tag == "testcase" and depth > 1:
            self._testcases += 1
            if self._testcases > MAX_TEST_CASES:
                raise ReportError(self._filename, TEST_CASES_PROBLEM)
            self._case_depth = depth
            self._attrib = attrib
        elif depth == 1 and tag not in _ROOTS:
            raise ReportError(
                self._filename, f"the root element is <{tag}>, not <testsuites> or <testsuite>"
            )
        elif tag == "testsuite":
            self._suite_started(attrib, depth)
        elif self._failure_depth:
            self._sink = None  # an element inside a suite's failure: not its text
        elif tag in _FAILURE_TAGS and depth == self._suite.depth + 1:
            self._failure_depth = depth
            self._failure_attrib = attrib
            self._sink = self._failure_text = _Text()

    def end(self, _tag: str) -> None:
        depth = self._depth
        self._depth = depth - 1
        if depth != self._case_depth:
            self._other_ended(depth)
            return
        # A testcase ends. The rest of this method is the path of most of a report's
        # testcases, those without children (passed, or not run), written out in one place:
        # it runs up to 200,000 times a report.
        self._case_depth = 0
        if self._children is not None:
            self._case_with_children_ended(self._children)
            self._children = None
            return
        attrib = self._attrib
        get = attrib.get
        suite = self._suite
        name = get("name")
        classname = get("classname")
        seconds = get("time")
        # Most tools write these three and no more; the others are looked for only when the
        # testcase has more attributes.
        if len(attrib) > (name is not None) + (classname is not None) + (seconds is not None):
            file, custom_id, timestamp, outcome = _other_attributes(get, suite)
        else:
            file, custom_id, timestamp, outcome = suite.file, None, suite.timestamp, PASSED
        name = "" if name is None else name.strip()
        if classname is not None:
            classname = classname.strip() or None
        if len(name) > _SURELY_SHORT_CHARS or len(classname or "") > _SURELY_SHORT_CHARS:
            name, classname = _identity_field(name) or "", _identity_field(classname)
        duration = None
        if seconds is not None:
            try:
                milliseconds = float(seconds) * 1000
            except ValueError:
                duration = _duration_ms(seconds)  # "1,234.5", "0,25", or no time at all
            else:
                if 0 <= milliseconds <= _MAX_MILLISECONDS:  # NaN fails both
                    duration = round(milliseconds)
        results = self._results
        results.append(
            new_case_result(
                name, classname, suite.parent, file, custom_id, outcome, 0, duration, None, None,
                timestamp,
            )
        )  # fmt: skip
        if len(results) > self._budget:
            raise TooManyResults(self._filename, self._budget)

    def _other_ended(self, depth: int) -> None:
        """The end of anything but a testcase."""
        case_depth = self._case_depth
        if case_depth:
            if depth == case_depth + 1:
                self._child_ended()
            else:
                self._inner_ended(depth - case_depth)
        elif depth == self._suite.depth:
            self._suite_ended()
        elif depth == self._failure_depth:
            self._suite_failure_ended()
        elif self._failure_depth and depth == self._failure_depth + 1:
            self._sink = self._failure_text  # back in the failure's own text

    def data(self, text: str) -> None:
        sink = self._sink
        if sink is not None:
            room = _CAPTURE_CHARS - sink.size
            if room > 0:
                # libxml2 hands a CDATA section over whole, however long.
                sink.parts.append(text if len(text) <= room else text[:room])
                sink.size += len(text)

    def close(self) -> list[CaseResult]:
        return self._results

    # --- testcases ---

    def _case_with_children_ended(self, children: _Children) -> None:
        attrib = self._attrib
        duration = _duration_ms(attrib.get("time"))
        if children.failure is not None and not children.flaky:
            # Every run failed. `failure` (or `error`) is the first run and the testcase's time
            # is its time; the reruns came after it.
            first = _Run(FAILED, children.failure, duration, children.timestamp)
            runs = [first, *children.runs]
        else:
            # The flaky runs failed first; the run the testcase itself describes came last.
            # With a `failure` too, that is a verdict on the flakiness, not a run of its own.
            skipped = children.skipped
            not_run = children.failure is None and (
                skipped is not None or _says_not_run(attrib.get)
            )
            evidence = skipped if not_run else None
            last = _Run(SKIPPED if not_run else PASSED, evidence, duration, children.timestamp)
            runs = [*children.runs, last]
        identity = _identity(attrib, self._suite)
        results = self._results
        for index, run in enumerate(runs):
            evidence = run.evidence
            results.append(
                new_case_result(
                    *identity,
                    run.outcome,
                    index,
                    run.duration_ms,
                    None if evidence is None else evidence.message,
                    None if evidence is None else evidence.detail,
                    run.timestamp,
                )
            )
        if len(results) > self._budget:
            raise TooManyResults(self._filename, self._budget)

    def _child_started(self, tag: str, attrib: dict[str, str]) -> None:
        children = self._children
        if children is None:
            stamp = self._attrib.get("timestamp")
            timestamp = None if stamp is None else _timestamp(stamp)
            children = self._children = _Children(timestamp or self._suite.timestamp)
        if tag in _EVIDENCE_TAGS:
            children.tag_and_attrib = (tag, attrib)
            children.description = _Text()
            children.trace = None
            self._sink = children.description
        else:
            children.tag_and_attrib = None
            self._sink = None  # system-out, system-err, properties: not evidence

    def _inner_started(self, tag: str, level: int) -> None:
        """An element below a child of the testcase (`level` 2 is a grandchild)."""
        children = self._children
        assert children is not None  # noqa: S101  # a grandchild comes after its parent
        if level == 2:
            # Surefire's and quick-junit's reruns hold their trace in `stackTrace`, beside
            # their own system-out and system-err.
            reading = children.tag_and_attrib is not None and children.trace is None
            if tag == "stackTrace" and reading:
                children.trace = _Text()
                children.grandchild_text = children.trace
            else:
                children.grandchild_text = None
            self._sink = children.grandchild_text
        else:
            self._sink = None

    def _inner_ended(self, level: int) -> None:
        children = self._children
        assert children is not None  # noqa: S101  # it ends inside the same testcase
        if level == 2:
            captured = children.tag_and_attrib is not None
            self._sink = children.description if captured else None
        elif level == 3:
            self._sink = children.grandchild_text
        else:
            self._sink = None

    def _child_ended(self) -> None:
        self._sink = None
        children = self._children
        assert children is not None  # noqa: S101  # set when the child started
        if children.tag_and_attrib is None:
            return
        tag, attrib = children.tag_and_attrib
        children.tag_and_attrib = None
        trace = children.trace
        evidence = _evidence(attrib, children.description, trace)
        if tag in _FAILURE_TAGS:
            # The first says why (pytest adds teardown errors after it).
            if children.failure is None:
                children.failure = evidence
        elif tag in _SKIP_TAGS:
            if children.skipped is None:
                children.skipped = evidence
        else:
            children.flaky = children.flaky or tag in _FLAKY_TAGS
            stamp = attrib.get("timestamp")
            children.runs.append(
                _Run(
                    FAILED,
                    evidence,
                    # Surefire writes neither on reruns; cargo-nextest (quick-junit) writes both.
                    _duration_ms(attrib.get("time")),
                    (None if stamp is None else _timestamp(stamp)) or children.timestamp,
                )
            )
            # The runs of one testcase count as they are read: one testcase may hold millions.
            if len(self._results) + len(children.runs) + 1 > self._budget:
                raise TooManyResults(self._filename, self._budget)

    # --- suites ---

    def _suite_started(self, attrib: dict[str, str], depth: int) -> None:
        outer = self._suites[0] if self._suites else None
        name = _identity_field(attrib.get("name"))
        stamp = attrib.get("timestamp")
        timestamp = (None if stamp is None else _timestamp(stamp)) or self._suite.timestamp
        if outer is None:
            file = attrib.get("file")
            if file is None:
                file = attrib.get("filepath")
            suite = _Suite(
                depth, name, parent=name, file=_identity_field(file), timestamp=timestamp
            )
        else:
            suite = _Suite(depth, name, parent=outer.parent, file=outer.file, timestamp=timestamp)
        self._suites.append(suite)
        self._suite = suite

    def _suite_ended(self) -> None:
        suite = self._suites.pop()
        self._suite = self._suites[-1] if self._suites else _NO_SUITE
        if suite.failure is None:
            return
        # A failure of the suite itself (a class that failed to initialise): a failed test
        # named after the suite, which holds no other trace of it (module docstring).
        results = self._results
        results.append(
            new_case_result(
                suite.name or "",
                suite.name,
                suite.parent,
                suite.file,
                None,
                FAILED,
                0,
                None,
                suite.failure.message,
                suite.failure.detail,
                suite.timestamp,
            )
        )
        if len(results) > self._budget:
            raise TooManyResults(self._filename, self._budget)

    def _suite_failure_ended(self) -> None:
        self._failure_depth = 0
        self._sink = None
        if self._suite.failure is None:
            # The first says why, as in a testcase.
            self._suite.failure = _evidence(self._failure_attrib, self._failure_text, None)


def _other_attributes(
    get: Callable[[str], str | None], suite: _Suite
) -> tuple[str | None, str | None, datetime | None, Outcome]:
    """file, custom id, timestamp and outcome of a testcase without children in `suite`, from
    its attributes' `get`.
    """
    file = get("file")
    if file is None:
        file = get("filepath")
    custom_id = get("id")
    stamp = get("timestamp")
    return (
        suite.file if file is None else _identity_field(file),
        None if custom_id is None else _identity_field(custom_id),
        suite.timestamp if stamp is None else _timestamp(stamp) or suite.timestamp,
        SKIPPED if _says_not_run(get) else PASSED,
    )


def _identity(
    attrib: dict[str, str], suite: _Suite
) -> tuple[str, str | None, str | None, str | None, str | None]:
    """name, classname, parent, file and custom id of a testcase in `suite`."""
    name = attrib.get("name")
    file = attrib.get("file")
    if file is None:
        file = attrib.get("filepath")
    custom_id = attrib.get("id")
    return (
        "" if name is None else _identity_field(name) or "",
        _identity_field(attrib.get("classname")),
        suite.parent,
        suite.file if file is None else _identity_field(file),
        None if custom_id is None else _identity_field(custom_id),
    )


# Characters that cannot take more than MAX_IDENTITY_BYTES in UTF-8, at four bytes each.
_SURELY_SHORT_CHARS = MAX_IDENTITY_BYTES // 4


def _identity_field(value: str | None) -> str | None:
    """An attribute as Trunk's parser reads it for the test id: trimmed and cut to
    MAX_IDENTITY_BYTES of UTF-8 at a character boundary (None when absent or then empty).
    """
    if value is None:
        return None
    value = value.strip()
    if len(value) > _SURELY_SHORT_CHARS:
        encoded = value.encode()
        if len(encoded) > MAX_IDENTITY_BYTES:
            value = encoded[:MAX_IDENTITY_BYTES].decode(errors="ignore")
    return value or None


def _says_not_run(get: Callable[[str], str | None]) -> bool:
    """Whether a testcase's `status` or `result` (from its attributes' `get`) says it did
    not run.
    """
    status = get("status")
    if status is not None and status.strip().lower() in _NOT_RUN:
        return True
    result = get("result")
    return result is not None and result.strip().lower() in _NOT_RUN


def _evidence(attrib: dict[str, str], description: _Text, trace: _Text | None) -> _Evidence:
    """The message and the body of a failure, skip or rerun element: its own text, and the
    text of its `stackTrace` after it.
    """
    text = description.block()
    stack = None if trace is None else trace.block()
    detail = text if stack is None else stack if text is None else f"{text}\n{stack}"
    message = _field(attrib.get("message")) or _first_line(text) or _first_line(stack)
    return _Evidence(message=message, detail=None if detail is None else detail[:MAX_DETAIL_CHARS])


def _field(value: str | None) -> str | None:
    """A message as kept: None when absent or blank, else cut to MAX_FIELD_CHARS."""
    if value is None or not value.strip():
        return None
    return value[:MAX_FIELD_CHARS]


_LEADING_BLANK_LINES = re.compile(r"\A\s*\n")
_FIRST_LINE = re.compile(r"\S[^\r\n]*")


def _block(text: str) -> str | None:
    """A failure body without the blank lines around it, cut to MAX_DETAIL_CHARS."""
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
_MAX_MILLISECONDS = _MAX_SECONDS * 1000


def _duration_ms(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        text = value.strip()
        if _GROUPED_SECONDS.fullmatch(text):
            text = text.replace(",", "")
        elif _DECIMAL_COMMA_SECONDS.fullmatch(text):
            text = text.replace(",", ".")
        else:
            return None
        seconds = float(text)
    # NaN fails both comparisons; infinities and a broken clock fail one.
    if not 0 <= seconds <= _MAX_SECONDS:
        return None
    return round(seconds * 1000)


_MAX_TIMESTAMP_CHARS = 64
# TestNG's `yyyy-MM-dd'T'HH:mm:ss z`: a local time and a zone's short name, or GMT+hh:mm.
_TIME_AND_ZONE = re.compile(
    r"(\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d(?:[.,]\d+)?)?) ?"
    r"(?:(?P<name>[A-Za-z]{1,5})|(?:GMT|UTC|UT)?(?P<offset>[+-]\d\d?(?::?\d\d)?))"
)
# Zone names Java's `z` writes that mean one offset only; others (IST, CST outside the US...)
# could be several and are not guessed.
_ZONE_HOURS = {
    "Z": 0.0, "UT": 0.0, "UTC": 0.0, "GMT": 0.0, "WET": 0.0, "WEST": 1.0, "CET": 1.0,
    "CEST": 2.0, "EET": 2.0, "EEST": 3.0, "MSK": 3.0, "JST": 9.0, "KST": 9.0, "AEST": 10.0,
    "AEDT": 11.0, "ACST": 9.5, "ACDT": 10.5, "AWST": 8.0, "NZST": 12.0, "NZDT": 13.0,
    "HST": -10.0, "AKST": -9.0, "AKDT": -8.0, "PST": -8.0, "PDT": -7.0, "MST": -7.0,
    "MDT": -6.0, "CST": -6.0, "CDT": -5.0, "EST": -5.0, "EDT": -4.0,
}  # fmt: skip


def _timestamp(value: str) -> datetime | None:
    """An instant in UTC: ISO 8601, TestNG's zone-named time, or RFC 2822 (Mocha's xunit
    reporter writes JavaScript's toUTCString()). Without an offset it is taken as UTC already.
    """
    if len(value) > _MAX_TIMESTAMP_CHARS:
        return None
    text = value.strip()
    try:
        parsed: datetime | None = datetime.fromisoformat(text)
    except ValueError:
        parsed = _other_timestamp(text)
    if parsed is None:
        return None
    # Gradle, jest-junit and the .NET loggers write local or UTC time without an offset;
    # UTC is the one reading that does not depend on where the server runs.
    try:
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    except OverflowError:
        return None


def _other_timestamp(text: str) -> datetime | None:
    zoned = _TIME_AND_ZONE.fullmatch(text)
    if zoned is not None:
        try:
            local = datetime.fromisoformat(zoned.group(1).replace(",", "."))
        except ValueError:
            return None
        zone = _zone(zoned.group("name"), zoned.group("offset"))
        return None if zone is None else local.replace(tzinfo=zone)
    try:
        parsed = email.utils.parsedate_to_datetime(text)
    except (ValueError, TypeError, IndexError, OverflowError):
        return None
    if parsed.tzinfo is None and not text.endswith("-0000"):
        return None  # a zone name email.utils does not know
    return parsed


def _zone(name: str | None, offset: str | None) -> timezone | None:
    if name is not None:
        hours = _ZONE_HOURS.get(name.upper())
        return None if hours is None else timezone(timedelta(hours=hours))
    assert offset is not None  # noqa: S101  # the pattern has one or the other
    sign = -1 if offset[0] == "-" else 1
    digits = offset[1:].replace(":", "")
    hours, minutes = (int(digits), 0) if len(digits) <= 2 else (int(digits[:-2]), int(digits[-2:]))
    if hours > 18 or minutes >= 60:
        return None
    return timezone(sign * timedelta(hours=hours, minutes=minutes))
