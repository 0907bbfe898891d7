"""The merge-queue metrics of one queue, computed from its entries and their history.

Rolling windows (`*_1h_*`) look at the hour before `now`. Durations follow the PR through its
states: waiting = entering `pending` to starting `testing`; testing = `testing` to leaving it;
time in queue = first admission of the episode to its conclusion (time in `not_ready` excluded).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from keepgreen.core.enums import PrState, StateReason, TestRunKind
from keepgreen.core.ids import PullRequestId, TestRunId
from keepgreen.core.model import QueueEntry, StateChange

BUCKETS: tuple[float, ...] = (60, 300, 600, 900, 1800, 3600, 5400, 7200)
WINDOW = timedelta(hours=1)
CONCLUSIONS = (PrState.MERGED, PrState.FAILED, PrState.CANCELLED)


@dataclass(slots=True)
class Histogram:
    """Observations in seconds, bucketed with the `le` bounds of BUCKETS (+Inf implied)."""

    counts: list[int] = field(default_factory=lambda: [0] * len(BUCKETS))
    total: float = 0.0
    count: int = 0

    def observe(self, seconds: float) -> None:
        for index, bound in enumerate(BUCKETS):
            if seconds <= bound:
                self.counts[index] += 1
        self.total += seconds
        self.count += 1

    def cumulative(self) -> list[tuple[str, int]]:
        """(`le`, cumulative count) pairs ending with +Inf, as Prometheus wants them."""
        pairs = [(_bound_label(bound), n) for bound, n in zip(BUCKETS, self.counts, strict=True)]
        return [*pairs, ("+Inf", self.count)]


def _bound_label(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)


@dataclass(slots=True)
class QueueMetrics:
    """The `mq_*` series of one queue for one `queue_type` (main or bisection): the
    interface's eight, and keepgreen's `mq_stalled_seconds` (main only).
    """

    repo: str
    branch: str
    queue_type: TestRunKind
    depth: int = 0
    awaiting_mergeability: int = 0
    testing_slots_active: int = 0
    conclusions: dict[PrState, int] = field(default_factory=lambda: dict.fromkeys(CONCLUSIONS, 0))
    restarts: int = 0
    wait_duration: Histogram = field(default_factory=Histogram)
    test_duration: Histogram = field(default_factory=Histogram)
    time_in_queue: Histogram = field(default_factory=Histogram)
    # How long the queue has been stalled (`keepgreen.core.stall`); 0 when it is not.
    stalled_seconds: float = 0.0
    # What the queue runs by now (`keepgreen.core.scheduler.adaptive`): PRs per run and runs
    # in flight at most.
    batch_size: int = 1
    speculation_depth: int = 1


def queue_metrics(
    *,
    repo: str,
    branch: str,
    entries: Iterable[QueueEntry],
    history: Sequence[StateChange],
    bisection_entries: frozenset[PullRequestId],
    run_kinds: Mapping[TestRunId, TestRunKind],
    now: datetime,
) -> tuple[QueueMetrics, QueueMetrics]:
    """The (main, bisection) metrics of a queue.

    `history` holds the full history of every entry that changed within the window, oldest
    first; `bisection_entries` are the entries now testing in a bisection run; `run_kinds` maps
    the test runs named in `history` to their kind.
    """
    main = QueueMetrics(repo, branch, TestRunKind.MAIN)
    bisection = QueueMetrics(repo, branch, TestRunKind.BISECTION)
    for entry in entries:
        if entry.state.is_admitted:
            main.depth += 1
        elif entry.state is PrState.NOT_READY and entry.is_submitted:
            main.awaiting_mergeability += 1
        if entry.state is PrState.TESTING:
            target = bisection if entry.id in bisection_entries else main
            target.testing_slots_active += 1
    since = now - WINDOW
    by_entry: dict[PullRequestId, list[StateChange]] = defaultdict(list)
    for change in history:
        by_entry[change.pull_request_id].append(change)
    for changes in by_entry.values():
        _replay(changes, since=since, main=main, bisection=bisection, run_kinds=run_kinds)
    return main, bisection


def _replay(
    changes: Sequence[StateChange],
    *,
    since: datetime,
    main: QueueMetrics,
    bisection: QueueMetrics,
    run_kinds: Mapping[TestRunId, TestRunKind],
) -> None:
    """Walk one entry's history, counting what happened inside the window."""
    admitted_at: datetime | None = None  # first admission of the current episode
    pending_since: datetime | None = None
    testing_since: datetime | None = None
    testing_kind = TestRunKind.MAIN
    for change in changes:
        inside = change.at >= since
        if change.reason is StateReason.SUBMITTED:
            admitted_at = pending_since = testing_since = None
        if change.from_state is PrState.TESTING and testing_since is not None and inside:
            target = bisection if testing_kind is TestRunKind.BISECTION else main
            target.test_duration.observe(_seconds(change.at - testing_since))
            if change.to_state is PrState.PENDING:
                target.restarts += 1
        if change.to_state is PrState.PENDING:
            pending_since = change.at
            admitted_at = admitted_at or change.at
        elif change.to_state is PrState.TESTING:
            testing_since = change.at
            testing_kind = (
                run_kinds.get(change.test_run_id, TestRunKind.MAIN)
                if (change.test_run_id is not None)
                else TestRunKind.MAIN
            )
            if inside and pending_since is not None:
                main.wait_duration.observe(_seconds(change.at - pending_since))
        elif change.to_state in CONCLUSIONS:
            if inside:
                main.conclusions[change.to_state] += 1
                if admitted_at is not None:
                    main.time_in_queue.observe(_seconds(change.at - admitted_at))
            admitted_at = pending_since = testing_since = None


def _seconds(delta: timedelta) -> float:
    return max(delta.total_seconds(), 0.0)
