"""Queue order: who is ahead of whom.

Entries already testing (or decided and waiting to merge) keep their admission order; priority
only reorders the entries that have not started testing (a lower value goes first, ties by
admission). `not_ready` and terminal entries are not in the queue.
"""

from __future__ import annotations

from collections.abc import Iterable

from keepgreen.core.enums import PrState
from keepgreen.core.model import QueueEntry

_STARTED = frozenset({PrState.TESTING, PrState.TESTS_PASSED, PrState.PENDING_FAILURE})


def queue_order(entries: Iterable[QueueEntry]) -> tuple[QueueEntry, ...]:
    """The admitted entries of one queue, front of the queue first."""
    admitted = [entry for entry in entries if entry.state.is_admitted]
    started = sorted((e for e in admitted if e.state in _STARTED), key=lambda e: (e.position, e.id))
    waiting = sorted(
        (e for e in admitted if e.state not in _STARTED),
        key=lambda e: (e.priority.value, e.position, e.id),
    )
    return (*started, *waiting)
