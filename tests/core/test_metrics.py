"""Queue metrics computed from entries and their history (pure core, plain values)."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keepgreen.core.enums import PrState, StateReason, TestRunKind
from keepgreen.core.ids import PullRequestId, TestRunId
from keepgreen.core.metrics import BUCKETS, Histogram, QueueMetrics, queue_metrics
from keepgreen.core.model import QueueEntry, StateChange
from tests.support.builders import T0, entry_id, make_change, make_entry

LABELS = ["60", "300", "600", "900", "1800", "3600", "5400", "7200", "+Inf"]


def minutes(n: float) -> datetime:
    return T0 + timedelta(minutes=n)


def history(number: int, *steps: tuple[float, PrState, StateReason]) -> list[StateChange]:
    """A PR's history from (minute, to_state, reason) steps; `from_state` follows the chain."""
    changes: list[StateChange] = []
    previous: PrState | None = None
    for minute, state, reason in steps:
        changes.append(
            make_change(
                number=number,
                from_state=previous,
                to_state=state,
                reason=reason,
                at=minutes(minute),
            )
        )
        previous = state
    return changes


SUBMIT = (PrState.NOT_READY, StateReason.SUBMITTED)
READY = (PrState.PENDING, StateReason.READY)
START = (PrState.TESTING, StateReason.TESTS_STARTED)
PASS = (PrState.TESTS_PASSED, StateReason.TESTS_PASSED)
MERGE = (PrState.MERGED, StateReason.MERGED_BY_QUEUE)
FAIL = (PrState.FAILED, StateReason.TESTS_FAILED)
CANCEL = (PrState.CANCELLED, StateReason.CANCELED_BY_USER)
RESTART = (PrState.PENDING, StateReason.RESTART_REQUESTED)


def at(minute: float, step: tuple[PrState, StateReason]) -> tuple[float, PrState, StateReason]:
    return (minute, *step)


def compute(
    *,
    entries: tuple[QueueEntry, ...] = (),
    changes: list[StateChange] | None = None,
    now_minute: float = 30,
    bisecting: frozenset[PullRequestId] = frozenset(),
    kinds: dict[TestRunId, TestRunKind] | None = None,
) -> tuple[QueueMetrics, QueueMetrics]:
    ordered = sorted(changes or [], key=lambda c: c.at)
    return queue_metrics(
        repo="acme/widgets",
        branch="main",
        entries=entries,
        history=ordered,
        bisection_entries=bisecting,
        run_kinds=kinds or {},
        now=minutes(now_minute),
    )


# -- Histogram ----------------------------------------------------------------------------------


def test_buckets_are_the_documented_bounds() -> None:
    assert BUCKETS == (60, 300, 600, 900, 1800, 3600, 5400, 7200)
    assert [label for label, _ in Histogram().cumulative()] == LABELS


def test_empty_histogram_counts_nothing() -> None:
    histogram = Histogram()
    assert histogram.cumulative() == [(label, 0) for label in LABELS]
    assert (histogram.count, histogram.total) == (0, 0.0)


@pytest.mark.parametrize(
    ("seconds", "first_bucket"),
    [(0, "60"), (60, "60"), (60.5, "300"), (300, "300"), (7200, "7200"), (7200.1, "+Inf")],
)
def test_bucket_bounds_are_inclusive(seconds: float, first_bucket: str) -> None:
    histogram = Histogram()
    histogram.observe(seconds)
    pairs = histogram.cumulative()
    index = LABELS.index(first_bucket)
    assert [n for _, n in pairs] == [0] * index + [1] * (len(LABELS) - index)


def test_histogram_sums_and_counts_observations() -> None:
    histogram = Histogram()
    for seconds in (30, 120, 120, 4000):
        histogram.observe(seconds)
    assert histogram.count == 4
    assert histogram.total == 4270
    assert dict(histogram.cumulative()) == {
        "60": 1,
        "300": 3,
        "600": 3,
        "900": 3,
        "1800": 3,
        "3600": 3,
        "5400": 4,
        "7200": 4,
        "+Inf": 4,
    }


@given(st.lists(st.floats(min_value=0, max_value=20_000, allow_nan=False), max_size=50))
def test_cumulative_counts_are_monotone_and_end_at_count(observations: list[float]) -> None:
    histogram = Histogram()
    for seconds in observations:
        histogram.observe(seconds)
    pairs = histogram.cumulative()
    counts = [n for _, n in pairs]
    assert counts == sorted(counts)
    assert pairs[-1] == ("+Inf", histogram.count)
    assert histogram.count == len(observations)
    assert math.isclose(histogram.total, sum(observations), abs_tol=1e-6)
    for bound, (_, n) in zip(BUCKETS, pairs, strict=False):
        assert n == sum(1 for seconds in observations if seconds <= bound)


# -- gauges from entries --------------------------------------------------------------------------


def test_depth_counts_admitted_entries_and_awaiting_counts_not_ready() -> None:
    states = (
        PrState.PENDING,
        PrState.TESTING,
        PrState.TESTS_PASSED,
        PrState.PENDING_FAILURE,
        PrState.NOT_READY,
        PrState.NOT_READY,
        PrState.MERGED,
        PrState.CANCELLED,
    )
    entries = tuple(make_entry(number=n, state=state) for n, state in enumerate(states, start=1))
    main, bisection = compute(entries=entries)
    assert (main.depth, main.awaiting_mergeability, main.testing_slots_active) == (4, 2, 1)
    assert (bisection.depth, bisection.awaiting_mergeability) == (0, 0)


def test_a_not_ready_entry_no_longer_submitted_is_not_awaiting() -> None:
    main, _ = compute(entries=(make_entry(number=1, state=PrState.NOT_READY, is_submitted=False),))
    assert main.awaiting_mergeability == 0


def test_testing_slots_are_split_between_main_and_bisection() -> None:
    entries = tuple(make_entry(number=n, state=PrState.TESTING) for n in (1, 2, 3))
    main, bisection = compute(entries=entries, bisecting=frozenset({entry_id(2)}))
    assert (main.testing_slots_active, bisection.testing_slots_active) == (2, 1)


def test_metrics_carry_their_labels() -> None:
    main, bisection = compute()
    assert (main.repo, main.branch, main.queue_type) == ("acme/widgets", "main", TestRunKind.MAIN)
    assert bisection.queue_type is TestRunKind.BISECTION


# -- rolling windows from history ---------------------------------------------------------------


def test_durations_follow_a_merged_pr() -> None:
    changes = history(1, at(0, SUBMIT), at(0, READY), at(2, START), at(12, PASS), at(12.5, MERGE))
    main, _ = compute(changes=changes)
    assert (main.wait_duration.count, main.wait_duration.total) == (1, 120)
    assert (main.test_duration.count, main.test_duration.total) == (1, 600)
    assert (main.time_in_queue.count, main.time_in_queue.total) == (1, 750)
    assert main.conclusions == {PrState.MERGED: 1, PrState.FAILED: 0, PrState.CANCELLED: 0}


def test_time_in_not_ready_is_excluded() -> None:
    changes = history(1, at(0, SUBMIT), at(20, READY), at(25, START), at(35, MERGE))
    main, _ = compute(changes=changes, now_minute=40)
    assert main.wait_duration.total == 300
    assert main.time_in_queue.total == 900


def test_each_conclusion_is_counted() -> None:
    changes = [
        *history(1, at(0, SUBMIT), at(0, READY), at(1, START), at(5, MERGE)),
        *history(2, at(0, SUBMIT), at(0, READY), at(1, START), at(5, FAIL)),
        *history(3, at(0, SUBMIT), at(0, READY), at(6, CANCEL)),
        *history(4, at(0, SUBMIT), at(7, CANCEL)),
        *history(5, at(0, SUBMIT), at(0, READY), at(2, CANCEL)),
    ]
    main, bisection = compute(changes=changes)
    assert main.conclusions == {PrState.MERGED: 1, PrState.FAILED: 1, PrState.CANCELLED: 3}
    assert sum(bisection.conclusions.values()) == 0


def test_a_pr_cancelled_before_admission_has_no_time_in_queue() -> None:
    main, _ = compute(changes=history(1, at(0, SUBMIT), at(7, CANCEL)))
    assert main.conclusions[PrState.CANCELLED] == 1
    assert main.time_in_queue.count == 0


def test_conclusions_older_than_an_hour_are_not_counted() -> None:
    changes = history(1, at(0, SUBMIT), at(0, READY), at(1, START), at(5, MERGE))
    inside, _ = compute(changes=changes, now_minute=64.9)
    outside, _ = compute(changes=changes, now_minute=65.1)
    assert inside.conclusions[PrState.MERGED] == 1
    assert inside.time_in_queue.count == 1
    assert outside.conclusions[PrState.MERGED] == 0
    assert outside.time_in_queue.count == 0
    assert outside.test_duration.count == 0


def test_events_before_the_window_are_not_observed_but_still_anchor_durations() -> None:
    # Admitted 100 minutes ago, testing started 70 minutes ago (outside the window), merged now.
    changes = history(1, at(0, SUBMIT), at(0, READY), at(30, START), at(99, MERGE))
    main, _ = compute(changes=changes, now_minute=100)
    assert main.wait_duration.count == 0
    assert main.time_in_queue.total == 99 * 60
    assert main.conclusions[PrState.MERGED] == 1


def test_a_restart_is_counted_and_its_test_time_observed() -> None:
    changes = history(1, at(0, SUBMIT), at(0, READY), at(1, START), at(4, RESTART), at(6, START))
    main, _ = compute(changes=changes)
    assert main.restarts == 1
    assert (main.test_duration.count, main.test_duration.total) == (1, 180)
    assert main.wait_duration.count == 2
    assert main.wait_duration.total == 60 + 120


def test_restarts_keep_the_first_admission_for_time_in_queue() -> None:
    changes = history(
        1, at(0, SUBMIT), at(0, READY), at(1, START), at(4, RESTART), at(6, START), at(10, MERGE)
    )
    main, _ = compute(changes=changes)
    assert main.time_in_queue.total == 600
    assert main.test_duration.total == 180 + 240


def test_leaving_testing_for_failure_is_not_a_restart() -> None:
    pending_failure = (PrState.PENDING_FAILURE, StateReason.TESTS_FAILED)
    changes = history(1, at(0, SUBMIT), at(0, READY), at(1, START), at(3, pending_failure))
    main, _ = compute(changes=changes)
    assert main.restarts == 0
    assert main.test_duration.total == 120


def test_a_resubmission_starts_a_new_episode() -> None:
    changes = history(
        1,
        at(0, SUBMIT),
        at(0, READY),
        at(5, CANCEL),
        at(20, SUBMIT),
        at(20, READY),
        at(22, START),
        at(30, MERGE),
    )
    main, _ = compute(changes=changes, now_minute=31)
    assert main.time_in_queue.count == 2
    assert main.time_in_queue.total == 300 + 600
    assert main.wait_duration.total == 120


def test_bisection_runs_count_test_time_and_restarts_under_bisection() -> None:
    run = TestRunId("run-b")
    preempt = (PrState.PENDING, StateReason.PREDECESSOR_CHANGED)
    changes = history(1, at(0, SUBMIT), at(0, READY), at(1, START), at(6, preempt))
    changes[2] = replace(changes[2], test_run_id=run)  # testing started in the bisection run
    main, bisection = compute(changes=changes, kinds={run: TestRunKind.BISECTION})
    assert (bisection.restarts, bisection.test_duration.total) == (1, 300)
    assert (main.restarts, main.test_duration.count) == (0, 0)


def test_histories_of_several_entries_are_kept_apart() -> None:
    changes = [
        *history(1, at(0, SUBMIT), at(0, READY), at(10, START), at(20, MERGE)),
        *history(2, at(5, SUBMIT), at(5, READY), at(6, START), at(8, FAIL)),
    ]
    main, _ = compute(changes=changes)
    assert (main.wait_duration.count, main.wait_duration.total) == (2, 600 + 60)
    assert main.time_in_queue.total == 1200 + 180
    assert main.test_duration.total == 600 + 120
