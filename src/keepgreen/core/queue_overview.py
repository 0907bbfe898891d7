"""A queue at a glance, from its entries' state changes: what merged lately, how long PRs
spent in the queue, and merges per hour (the dashboard's queue cards).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from keepgreen.core.enums import PrState
from keepgreen.core.ids import PullRequestId
from keepgreen.core.model import StateChange

OVERVIEW_WINDOW = timedelta(hours=24)
HOURS = 24


@dataclass(frozen=True, slots=True)
class QueueOverview:
    """`merged_per_hour` holds the last 24 hours, oldest first; the percentiles are of the
    time from submission to merge of the PRs merged in the window (None when none merged).
    """

    merged: int
    left_unmerged: int  # failed or cancelled in the window
    time_in_queue_p50: timedelta | None
    time_in_queue_p90: timedelta | None
    merged_per_hour: tuple[int, ...]


def percentile(values: Sequence[timedelta], percent: int) -> timedelta | None:
    """The nearest-rank percentile: the smallest value that `percent`% of them do not exceed."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * percent // 100))  # ceil, in integers
    return ordered[rank - 1]


def overview(history: Sequence[StateChange], *, now: datetime) -> QueueOverview:
    """The overview of the 24 hours before `now`, from the whole history of every entry that
    changed in them (oldest first, as `HistoryRepository.list_since` gives it).
    """
    since = now - OVERVIEW_WINDOW
    submitted: dict[PullRequestId, datetime] = {}
    durations: list[timedelta] = []
    per_hour = [0] * HOURS
    left_unmerged = 0
    for change in history:
        submitted.setdefault(change.pull_request_id, change.at)
        if change.at < since or change.at > now:
            continue
        if change.to_state is PrState.MERGED:
            durations.append(change.at - submitted[change.pull_request_id])
            hour = int((change.at - since) / timedelta(hours=1))
            per_hour[min(hour, HOURS - 1)] += 1
        elif change.to_state in (PrState.FAILED, PrState.CANCELLED):
            left_unmerged += 1
    return QueueOverview(
        merged=len(durations),
        left_unmerged=left_unmerged,
        time_in_queue_p50=percentile(durations, 50),
        time_in_queue_p90=percentile(durations, 90),
        merged_per_hour=tuple(per_hour),
    )
