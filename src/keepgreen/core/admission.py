"""Admission: whether a submitted PR enters the queue (`pending`) or waits (`not_ready`)."""

from __future__ import annotations

from keepgreen.core.enums import PrState, QueueMode, QueueState
from keepgreen.core.model import Queue, QueueModes, Readiness


def requires_impacted_targets(queue: Queue | QueueModes) -> bool:
    """Parallel queues (and queues switching to parallel) need targets for each PR head."""
    return QueueMode.PARALLEL in (queue.mode, queue.pending_mode)


def admitted_state(readiness: Readiness, queue: Queue) -> PrState:
    """`pending` when the PR is ready and the queue is running; `not_ready` otherwise.

    A paused or mode-switching queue holds new PRs in `not_ready`; a draining queue refuses them
    before this point.
    """
    if readiness.is_ready and queue.state is QueueState.RUNNING:
        return PrState.PENDING
    return PrState.NOT_READY
