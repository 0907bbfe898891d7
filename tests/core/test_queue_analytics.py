"""A queue's analytics and overview, from hand-written histories whose figures are counted by
hand: the split of time in queue, merges per bucket, why PRs left, runs and batching.
"""

from __future__ import annotations

from datetime import timedelta

from keepgreen.core.enums import PrState, StateReason
from keepgreen.core.ids import TestRunId
from keepgreen.core.model import StateChange
from keepgreen.core.queue_analytics import Spread, analytics
from keepgreen.core.queue_overview import overview, percentile
from tests.support.builders import T0, make_change

MIN = timedelta(minutes=1)
BATCH = TestRunId("run-batch")
ALONE = TestRunId("run-alone")


def journey(number: int, *steps: tuple[int, PrState, StateReason, TestRunId | None]) -> list:
    """PR `number`'s changes: each step is (minutes after T0, state, reason, run)."""
    changes: list[StateChange] = []
    before: PrState | None = None
    for minutes, state, reason, run in steps:
        changes.append(
            make_change(
                number=number,
                from_state=before,
                to_state=state,
                reason=reason,
                at=T0 + minutes * MIN,
                test_run_id=run,
            )
        )
        before = state
    return changes


# PR 1: blocked 2 min, waits 3, tests 10 in a batch with PR 2, merges at 15.
# PR 2: submitted at 1, waits 4, tests 10 in the batch, merges at 15.
# PR 3: waits 1, tests alone, is retried once, and fails at 8 (tests_failed).
HISTORY = [
    *journey(
        1,
        (0, PrState.NOT_READY, StateReason.SUBMITTED, None),
        (2, PrState.PENDING, StateReason.READY, None),
        (5, PrState.TESTING, StateReason.TESTS_STARTED, BATCH),
        (15, PrState.MERGED, StateReason.MERGED_BY_QUEUE, BATCH),
    ),
    *journey(
        2,
        (1, PrState.PENDING, StateReason.SUBMITTED, None),
        (5, PrState.TESTING, StateReason.TESTS_STARTED, BATCH),
        (14, PrState.TESTS_PASSED, StateReason.TESTS_PASSED, BATCH),
        (15, PrState.MERGED, StateReason.MERGED_BY_QUEUE, BATCH),
    ),
    *journey(
        3,
        (2, PrState.PENDING, StateReason.SUBMITTED, None),
        (3, PrState.TESTING, StateReason.TESTS_STARTED, ALONE),
        (6, PrState.TESTING, StateReason.RETRYING, ALONE),
        (8, PrState.FAILED, StateReason.TESTS_FAILED, ALONE),
    ),
]


def test_time_in_queue_is_split_by_what_the_pr_was_doing() -> None:
    figures = analytics(HISTORY, start=T0, end=T0 + 60 * MIN)
    # PR 1: total 15, blocked 2, waiting 3, testing 10. PR 2: total 14, waiting 4, testing 10.
    assert figures.time_in_queue["total"] == Spread(14 * MIN, 15 * MIN)
    assert figures.time_in_queue["blocked"] == Spread(timedelta(0), 2 * MIN)
    assert figures.time_in_queue["waiting"] == Spread(3 * MIN, 4 * MIN)
    assert figures.time_in_queue["testing"] == Spread(10 * MIN, 10 * MIN)


def test_merges_leavers_runs_and_batching_are_counted() -> None:
    figures = analytics(HISTORY, start=T0, end=T0 + 60 * MIN)
    assert figures.bucket == timedelta(hours=1)
    assert figures.merged_per_bucket == (2,)
    assert figures.left == {"merged/merged_by_queue": 2, "failed/tests_failed": 1}
    assert figures.runs == 2
    assert figures.runs_saved_by_batching == 1  # PRs 1 and 2 shared a run
    assert figures.runs_per_merged_pr == 1.0
    assert figures.retries == 1
    assert figures.flaky_failures_forgiven == 0


def test_only_the_period_counts_and_long_periods_go_per_day() -> None:
    before = analytics(HISTORY, start=T0 - timedelta(days=3), end=T0 + 10 * MIN)
    assert before.bucket == timedelta(days=1)
    assert len(before.merged_per_bucket) == 4
    assert before.merged == 0
    assert before.left == {"failed/tests_failed": 1}
    assert before.left_per_bucket["failed/tests_failed"] == (0, 0, 0, 1)
    assert before.time_in_queue["total"] == Spread(None, None)


def test_a_resubmitted_pr_counts_its_last_episode_only() -> None:
    history = journey(
        4,
        (0, PrState.PENDING, StateReason.SUBMITTED, None),
        (10, PrState.CANCELLED, StateReason.CANCELED_BY_USER, None),
        (30, PrState.PENDING, StateReason.SUBMITTED, None),
        (31, PrState.TESTING, StateReason.TESTS_STARTED, ALONE),
        (36, PrState.MERGED, StateReason.MERGED_BY_QUEUE, ALONE),
    )
    figures = analytics(history, start=T0, end=T0 + 60 * MIN)
    assert figures.time_in_queue["total"] == Spread(6 * MIN, 6 * MIN)
    assert figures.time_in_queue["waiting"] == Spread(MIN, MIN)
    assert figures.left == {"cancelled/canceled_by_user": 1, "merged/merged_by_queue": 1}


def test_the_overview_counts_the_last_day_per_hour() -> None:
    now = T0 + timedelta(hours=2)
    summary = overview(HISTORY, now=now)
    assert summary.merged == 2
    assert summary.left_unmerged == 1
    assert summary.merged_per_hour[22] == 2  # T0 + 15 min is 22 h 15 min into the window
    assert sum(summary.merged_per_hour) == 2
    assert summary.time_in_queue_p50 == 14 * MIN
    assert overview(HISTORY, now=now + timedelta(days=1)).merged == 0


def test_percentiles_are_nearest_rank() -> None:
    values = [n * MIN for n in range(1, 11)]
    assert percentile(values, 50) == 5 * MIN
    assert percentile(values, 90) == 9 * MIN
    assert percentile(values, 95) == 10 * MIN
    assert percentile([], 50) is None
