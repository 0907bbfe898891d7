"""A queue's figures over a period, from its entries' state changes: merges per hour or day,
time in queue split by what the PR was doing, why PRs left, and what CI it took.

Everything is read from the history the queue keeps anyway (`StateChange`s): a PR's time is
split by the state it was in, a run is counted once when PRs start testing in it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import pairwise

from keepgreen.core.enums import PrState, StateReason
from keepgreen.core.ids import PullRequestId, TestRunId
from keepgreen.core.model import StateChange
from keepgreen.core.queue_overview import percentile

HOURLY_UP_TO = timedelta(hours=48)  # longer periods are counted per day

# What a PR is doing in each state, for the split of its time in the queue.
#   waiting: admitted, waits for a test slot
#   testing: in a run, or passed and waiting for the PRs ahead, or failed and waiting on blame
#   blocked: submitted but not admitted: not ready (checks, mergeability, base), or the queue
#            does not admit (paused, draining, switching modes)
_PART_OF = {
    PrState.NOT_READY: "blocked",
    PrState.PENDING: "waiting",
    PrState.TESTING: "testing",
    PrState.TESTS_PASSED: "testing",
    PrState.PENDING_FAILURE: "testing",
}
PARTS = ("total", "waiting", "testing", "blocked")


@dataclass(frozen=True, slots=True)
class Spread:
    """The p50 and p95 of a duration over the PRs merged in the period (None: none merged)."""

    p50: timedelta | None
    p95: timedelta | None


@dataclass(frozen=True, slots=True)
class QueueAnalytics:
    """The figures of [start, end), with series in `bucket`-long steps from `start`.

    `left` counts PRs that left by how (`merged`, `failed`, `cancelled`) and why (the
    reason code of the change): "failed/tests_failed". `runs` counts the test runs PRs started
    testing in; `runs_saved_by_batching` the runs the PRs tested together in a batch did not
    need (a batch of n PRs is n - 1 runs saved).
    """

    start: datetime
    end: datetime
    bucket: timedelta
    merged: int
    merged_per_bucket: tuple[int, ...]
    time_in_queue: dict[str, Spread]
    left: dict[str, int]
    left_per_bucket: dict[str, tuple[int, ...]]
    runs: int
    runs_saved_by_batching: int
    retries: int
    flaky_failures_forgiven: int

    @property
    def runs_per_merged_pr(self) -> float | None:
        return self.runs / self.merged if self.merged else None


def bucket_of(start: datetime, end: datetime) -> timedelta:
    return timedelta(hours=1) if end - start <= HOURLY_UP_TO else timedelta(days=1)


def analytics(history: Sequence[StateChange], *, start: datetime, end: datetime) -> QueueAnalytics:
    """The figures of [start, end) from the whole history (oldest first) of every entry that
    changed in it.
    """
    bucket = bucket_of(start, end)
    buckets = -(-(end - start) // bucket)

    def slot(at: datetime) -> int:
        return min((at - start) // bucket, buckets - 1)

    by_entry: dict[PullRequestId, list[StateChange]] = defaultdict(list)
    for change in history:
        by_entry[change.pull_request_id].append(change)
    merged_per_bucket = [0] * buckets
    spans: dict[str, list[timedelta]] = {part: [] for part in PARTS}
    left: Counter[str] = Counter()
    left_per_bucket: dict[str, list[int]] = {}
    run_members: dict[TestRunId, set[PullRequestId]] = defaultdict(set)
    reasons: Counter[StateReason] = Counter()
    for entry_id, changes in by_entry.items():
        for index, change in enumerate(changes):
            if not start <= change.at < end:
                continue
            reasons[change.reason] += 1
            if change.to_state is PrState.TESTING and change.test_run_id is not None:
                run_members[change.test_run_id].add(entry_id)
            if not change.to_state.is_terminal:
                continue
            key = f"{change.to_state.value}/{change.reason.value}"
            left[key] += 1
            left_per_bucket.setdefault(key, [0] * buckets)[slot(change.at)] += 1
            if change.to_state is PrState.MERGED:
                merged_per_bucket[slot(change.at)] += 1
                for part, spent in _split(changes[: index + 1]).items():
                    spans[part].append(spent)
    return QueueAnalytics(
        start=start,
        end=end,
        bucket=bucket,
        merged=sum(merged_per_bucket),
        merged_per_bucket=tuple(merged_per_bucket),
        time_in_queue={
            part: Spread(percentile(values, 50), percentile(values, 95))
            for part, values in spans.items()
        },
        left=dict(left),
        left_per_bucket={key: tuple(counts) for key, counts in left_per_bucket.items()},
        runs=len(run_members),
        runs_saved_by_batching=sum(len(members) - 1 for members in run_members.values()),
        retries=reasons[StateReason.RETRYING],
        flaky_failures_forgiven=reasons[StateReason.FLAKY_FAILURES_FORGIVEN],
    )


def _split(changes: Sequence[StateChange]) -> dict[str, timedelta]:
    """The time of the last episode (from the change that brought the PR into the queue, out
    of nothing or a terminal state, to its last change) by part.
    """
    first = max(
        (
            i
            for i, change in enumerate(changes)
            if change.from_state is None or change.from_state.is_terminal
        ),
        default=0,
    )
    episode = changes[first:]
    spent = dict.fromkeys(PARTS, timedelta(0))
    for change, following in pairwise(episode):
        part = _PART_OF.get(change.to_state)
        if part is not None:
            spent[part] += following.at - change.at
    spent["total"] = episode[-1].at - episode[0].at
    return spent
