"""When two reports of CI runs are one run (their key), what a run reported again keeps, and
which times a run may have.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest

from keepgreen.core.flaky.ci_runs import (
    CiProvider,
    CiRun,
    ConclusionCause,
    RunConclusion,
    reported_again,
    run_key_of,
    run_time_problem,
)
from keepgreen.core.ids import CiRunId, RepositoryId

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
GITHUB = CiProvider.GITHUB


def a_run(**fields: object) -> CiRun:
    defaults: dict[str, object] = {
        "id": CiRunId("run-1"),
        "repository_id": RepositoryId("repo-1"),
        "ci_job_name": "test",
        "branch": "main",
        "sha": "a" * 40,
        "run_start": T0,
        "run_end": T0 + timedelta(minutes=10),
        "attempt": 1,
        "reported_at": T0 + timedelta(minutes=10),
        "updated_at": T0 + timedelta(minutes=10),
        "provider": GITHUB,
        "providers_run_id": "7301",
        "providers_job_id": "2051",
    }
    return CiRun(**{**defaults, **fields})  # type: ignore[arg-type] # the builder's defaults


def test_without_a_providers_run_id_there_is_no_key() -> None:
    assert run_key_of(GITHUB, None, "2051", attempt=1) is None
    assert a_run(providers_run_id=None).run_key is None


def test_the_key_is_the_same_for_the_same_run_and_differs_in_each_part() -> None:
    key = run_key_of(GITHUB, "7301", "2051", attempt=1)
    assert key is not None
    assert len(key) == 64
    assert int(key, 16) >= 0  # hex digits
    assert run_key_of(GITHUB, "7301", "2051", attempt=1) == key
    assert a_run().run_key == key
    others = {
        run_key_of(None, "7301", "2051", attempt=1),
        run_key_of(CiProvider.GITLAB, "7301", "2051", attempt=1),
        run_key_of(GITHUB, "7302", "2051", attempt=1),
        run_key_of(GITHUB, "7301", None, attempt=1),
        run_key_of(GITHUB, "7301", "", attempt=1),
        run_key_of(GITHUB, "7301", "2051", attempt=2),
    }
    assert len(others) == 6
    assert key not in others


def test_the_parts_of_a_key_cannot_run_into_each_other() -> None:
    assert run_key_of(GITHUB, "73", "012051", attempt=1) != run_key_of(
        GITHUB, "7301", "2051", attempt=1
    )
    assert run_key_of(GITHUB, "1", "1", attempt=11) != run_key_of(GITHUB, "1", "11", attempt=1)


def test_a_run_reported_again_takes_the_reports_fields_and_keeps_its_id() -> None:
    stored = a_run(conclusion=RunConclusion.FAILURE, conclusion_cause=ConclusionCause.TEST)
    later = T0 + timedelta(minutes=30)
    report = a_run(
        id=CiRunId("run-2"),
        ci_job_name="test (retry)",
        run_end=T0 + timedelta(minutes=25),
        reported_at=later,
        updated_at=later,
        conclusion=RunConclusion.SUCCESS,
        conclusion_cause=None,
    )
    merged = reported_again(stored, report)
    assert merged == replace(
        report,
        id=stored.id,
        reported_at=stored.reported_at,
        conclusion=RunConclusion.SUCCESS,
        conclusion_cause=ConclusionCause.TEST,  # left out: kept
    )
    assert merged.updated_at == later


def test_a_report_without_a_conclusion_keeps_the_stored_one() -> None:
    stored = a_run(conclusion=RunConclusion.CANCELLED, conclusion_cause=ConclusionCause.CI)
    merged = reported_again(stored, a_run(id=CiRunId("run-2")))
    assert (merged.conclusion, merged.conclusion_cause) == (
        RunConclusion.CANCELLED,
        ConclusionCause.CI,
    )


@pytest.mark.parametrize(
    ("moment", "allowed"),
    [
        (datetime(1970, 1, 1, tzinfo=UTC), True),
        (datetime(1970, 1, 1, 0, 59, tzinfo=timezone(timedelta(hours=1))), False),
        (T0, True),
        (datetime(9998, 12, 31, 23, 59, 59, tzinfo=UTC), True),
        (datetime(9999, 1, 1, tzinfo=UTC), False),
        # Beyond what a UTC datetime holds: compared, never converted.
        (datetime(9999, 12, 31, 23, 59, tzinfo=timezone(-timedelta(hours=23, minutes=59))), False),
        (datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=23))), False),
    ],
)
def test_a_run_starts_and_ends_between_1970_and_9999(moment: datetime, allowed: bool) -> None:
    assert (run_time_problem(moment) is None) is allowed
