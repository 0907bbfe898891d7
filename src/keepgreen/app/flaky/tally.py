"""One upload's results, tallied per test as its reports are read.

An upload is stored per test, not per result: what the roll-ups add (runs, passes, failures),
the test's final outcome, and each failed attempt with its summary. A passing or skipped
attempt leaves nothing of its own, so a report's results can be dropped as soon as it is
tallied, and what the upload holds grows with its tests, not with its text.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import NamedTuple

from keepgreen.core.flaky.failures import failure_summary, summary_key
from keepgreen.core.flaky.ids import make_test_id
from keepgreen.core.flaky.results import CaseResult, Outcome

NO_FAILURE_MESSAGE = "(no failure message)"


class FailedAttempt(NamedTuple):
    attempt: int
    duration_ms: int | None
    summary: str | None  # normalised, from the failure's message and body


class TestTally:
    """One test's results in one upload."""

    __test__ = False
    __slots__ = (
        "_rank",
        "classname",
        "failed_attempts",
        "failures",
        "file",
        "final",
        "name",
        "parent",
        "passes",
        "test_id",
    )

    def __init__(self, test_id: str, result: CaseResult) -> None:
        self.test_id = test_id
        self.name = result.name
        self.classname = result.classname
        self.parent = result.parent
        self.file = result.file
        self.passes = 0
        self.failures = 0
        self.failed_attempts: list[FailedAttempt] = []
        self.final = Outcome.SKIPPED
        self._rank = (-1, -1, -1)

    @property
    def runs(self) -> int:
        """Attempts that ran (a skip is no run)."""
        return self.passes + self.failures

    def add(self, result: CaseResult, order: int) -> int:
        """Counts one attempt; answers the characters of text it added."""
        outcome = result.outcome
        # The final outcome is the last attempt that ran (a failure then a pass on retry is a
        # pass), by attempt number, then by place in the upload; skipped only when none ran.
        rank = (0 if outcome is Outcome.SKIPPED else 1, result.attempt, order)
        if rank > self._rank:
            self._rank, self.final = rank, outcome
        if outcome is Outcome.PASSED:
            self.passes += 1
        elif outcome is Outcome.FAILED:
            self.failures += 1
            summary = failure_summary(result.message, result.detail)
            self.failed_attempts.append(FailedAttempt(result.attempt, result.duration_ms, summary))
            return len(summary or "")
        return 0

    def summary_counts(self) -> Iterator[tuple[str, str, int]]:
        """(key, summary, occurrences) of this upload's failures of the test, grouped."""
        counts: dict[str, tuple[str, int]] = {}
        for failed in self.failed_attempts:
            summary = failed.summary or NO_FAILURE_MESSAGE
            key = summary_key(summary)
            counts[key] = (summary, counts.get(key, (summary, 0))[1] + 1)
        for key, (summary, occurrences) in counts.items():
            yield key, summary, occurrences


class Tally:
    """Every test of one upload, in the order first seen."""

    def __init__(self, org_slug: str, repo_name: str, variant: str) -> None:
        self._org_slug = org_slug
        self._repo_name = repo_name
        self._variant = variant
        self.tests: dict[str, TestTally] = {}
        self.results = 0
        self.text_chars = 0
        # Ids by identity fields: a test's attempts (reruns, shards of one upload) share them,
        # and hashing is a good part of the cost of a result.
        self._ids: dict[tuple[str | None, ...], str] = {}

    def add(self, results: Iterable[CaseResult]) -> None:
        tests, ids = self.tests, self._ids
        for result in results:
            identity = (result.file, result.classname, result.parent, result.name, result.custom_id)
            test_id = ids.get(identity)
            if test_id is None:
                test_id = ids[identity] = make_test_id(
                    self._org_slug,
                    self._repo_name,
                    file=result.file,
                    classname=result.classname,
                    parent=result.parent,
                    name=result.name,
                    custom_id=result.custom_id,
                    variant=self._variant,
                )
            test = tests.get(test_id)
            if test is None:
                test = tests[test_id] = TestTally(test_id, result)
                # The names this upload keeps once per test (a summary is counted by add).
                self.text_chars += (
                    len(result.name)
                    + len(result.classname or "")
                    + len(result.parent or "")
                    + len(result.file or "")
                )
            self.text_chars += test.add(result, self.results)
            self.results += 1

    def final_count(self, outcome: Outcome) -> int:
        return sum(1 for test in self.tests.values() if test.final is outcome)


def hour_of(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def day_of(moment: datetime) -> datetime:
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


_pausing = threading.Lock()
_paused_by = 0
_was_enabled = True  # the collector's state when the first of the blocks began


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Python's cycle collector paused while the block runs (and while any other thread is in
    such a block). Reading a report builds hundreds of thousands of objects that refer to no
    cycle; the collector would scan them all again and again as they grow (a third of the
    time of a tally), and reference counting frees them all the same.
    """
    global _paused_by, _was_enabled  # noqa: PLW0603 (one count for the process, as the collector is)
    with _pausing:
        if not _paused_by:
            _was_enabled = gc.isenabled()
        _paused_by += 1
        gc.disable()
    try:
        yield
    finally:
        with _pausing:
            _paused_by -= 1
            if not _paused_by and _was_enabled:
                gc.enable()
