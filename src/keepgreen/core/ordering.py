"""Queue order: who is ahead of whom.

Urgent entries (priority 0) skip the line: they go ahead of everything, even of entries being
tested (which the scheduler then restarts on top of them). Among the rest, entries already
started (testing or decided, or held by a queued bisection run) keep their admission order, and
priority only reorders the entries that have not started (a lower value goes first, ties by
admission). `not_ready` and terminal entries are not in the queue.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from keepgreen.core.enums import PrState
from keepgreen.core.ids import PullRequestId
from keepgreen.core.priority import Priority


class Orderable(Protocol):
    """What decides a PR's place: a whole entry has it, and so does a `Placed`."""

    @property
    def id(self) -> PullRequestId: ...
    @property
    def state(self) -> PrState: ...
    @property
    def priority(self) -> Priority: ...
    @property
    def position(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Placed:
    """An entry reduced to what orders it (read cheaply, for a place in line)."""

    id: PullRequestId
    state: PrState
    priority: Priority
    position: int


T = TypeVar("T", bound=Orderable)


def queue_order(
    entries: Iterable[T], *, holding: frozenset[PullRequestId] = frozenset()
) -> tuple[T, ...]:
    """The admitted entries of one queue, front of the queue first.

    `holding` names pending entries that a run already holds; they order as started ones.
    """
    admitted = [entry for entry in entries if entry.state.is_admitted]

    def is_started(entry: T) -> bool:
        return entry.state.is_started or entry.id in holding

    urgent = sorted(
        (e for e in admitted if e.priority.skips_the_line),
        key=lambda e: (not is_started(e), e.position, e.id),
    )
    rest = [e for e in admitted if not e.priority.skips_the_line]
    started = sorted((e for e in rest if is_started(e)), key=lambda e: (e.position, e.id))
    waiting = sorted(
        (e for e in rest if not is_started(e)),
        key=lambda e: (e.priority.value, e.position, e.id),
    )
    return (*urgent, *started, *waiting)
