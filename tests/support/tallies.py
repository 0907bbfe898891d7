"""One test's results in one upload, built for store tests (as ingest tallies them)."""

from __future__ import annotations

from keepgreen.app.flaky.tally import TestTally
from keepgreen.core.flaky.results import CaseResult, Outcome


def a_tally(
    test_id: str,
    name: str,
    *,
    passes: int = 0,
    failures: int = 0,
    message: str | None = None,
    classname: str | None = "pkg.Thing",
    parent: str | None = "suite",
    file: str | None = "tests/test_thing.py",
) -> TestTally:
    """`failures` failed attempts (with `message`) then `passes` passed ones."""
    first = CaseResult(
        name=name,
        classname=classname,
        parent=parent,
        file=file,
        custom_id=None,
        outcome=Outcome.PASSED,
    )
    tally = TestTally(test_id, first)
    outcomes = [Outcome.FAILED] * failures + [Outcome.PASSED] * passes
    for attempt, outcome in enumerate(outcomes):
        result = CaseResult(
            name=name,
            classname=classname,
            parent=parent,
            file=file,
            custom_id=None,
            outcome=outcome,
            attempt=attempt,
            duration_ms=10,
            message=message if outcome is Outcome.FAILED else None,
        )
        tally.add(result, attempt)
    return tally
