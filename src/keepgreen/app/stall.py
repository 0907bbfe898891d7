"""A queue's stall read from the database (for `getQueue` and the metrics), and told in the
worker's log: once when it starts, again every `stall_minutes` while it lasts, and when it ends.

The judgement is `keepgreen.core.stall`'s; this module only reads its facts. Reading them is
cheap when the queue is not stalled (its row and live entries, which the callers hold
already): the runs, statuses, incidents and outbox are read only for a stalled or paused one.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog

from keepgreen.app.ports import Clock, UnitOfWork, UnitOfWorkFactory
from keepgreen.app.telemetry import Telemetry
from keepgreen.core.enums import QueueState
from keepgreen.core.ids import QueueId
from keepgreen.core.model import CommitStatus, Queue, QueueEntry, Repository
from keepgreen.core.scheduler import Land, Policy
from keepgreen.core.stall import Stall, StallFacts, assess, counted_entries, stalled_since

log = structlog.get_logger("keepgreen.queue")


def read_stall(
    uow: UnitOfWork,
    queue: Queue,
    repository: Repository,
    entries: Sequence[QueueEntry],
    *,
    now: datetime,
) -> Stall:
    """The queue's stall at `now` (`entries`: its live entries). Not stalled and not paused,
    it is judged from `entries` alone, and says nothing of what it waits on (the caller
    shows its open incident, if any, as before).
    """
    if queue.state is not QueueState.PAUSED and stalled_since(queue, entries, now=now) is None:
        return Stall()
    return assess(stall_facts(uow, queue, repository, entries), now=now)


def stall_facts(
    uow: UnitOfWork, queue: Queue, repository: Repository, entries: Sequence[QueueEntry]
) -> StallFacts:
    """What `assess` judges, read in the caller's unit of work."""
    runs = tuple(uow.test_runs.list_open(queue.id))
    statuses: dict[str, dict[str, CommitStatus]] = {}
    for sha in {run.sha for run in runs if run.sha is not None}:
        statuses[sha] = {s.context: s for s in uow.statuses.list_for_sha(repository.id, sha)}
    policy = Policy(has_built_in_ci=repository.ci_command is not None)
    return StallFacts(
        queue=queue,
        entries=tuple(entries),
        runs=runs,
        statuses=statuses,
        required=policy.required_statuses(queue),
        incidents=tuple(uow.incidents.list_open([queue.id])),
        landing=tuple(
            effect.number for _, effect in uow.effects.list(queue.id) if isinstance(effect, Land)
        ),
        host="GitHub" if repository.github_installation_id is not None else None,
    )


@dataclass(slots=True)
class _Told:
    """A stall the log told of: since when, and when its next reminder is due."""

    since: datetime
    remind_at: datetime


class StallWatch:
    """The worker's log of its queues' stalls (one per worker process).

    `check` is called once per pass for each queue the worker holds, with what the pass read
    at its start; the stall is told once, reminded every `stall_minutes`, and its end told
    with why it ended. A queue whose lease moves to another worker is told there afresh.
    """

    def __init__(self, uow: UnitOfWorkFactory, *, clock: Clock, telemetry: Telemetry) -> None:
        self._uow = uow
        self._clock = clock
        self._telemetry = telemetry
        self._told: dict[QueueId, _Told] = {}
        self._lock = threading.Lock()

    def check(
        self, queue: Queue, repository: Repository, entries: Sequence[QueueEntry], *, name: str
    ) -> None:
        now = self._clock()
        since = stalled_since(queue, entries, now=now)
        with self._lock:
            told = self._told.get(queue.id)
        if since is None:
            if told is not None:
                self._ended(queue, entries, told, name=name, now=now)
            return
        if told is not None and now < told.remind_at:
            return
        with self._uow() as uow:
            stall = assess(stall_facts(uow, queue, repository, entries), now=now)
        every = timedelta(minutes=queue.config.stall_minutes)
        first = told is None
        since = since if told is None else told.since
        with self._lock:
            self._told[queue.id] = _Told(since, now + every)
            stalled = len(self._told)
        self._telemetry.queues_stalled(stalled)
        log.warning(
            "queue stalled" if first else "queue still stalled",
            queue=name,
            minutes=round((now - since).total_seconds() / 60),
            since=since.isoformat(),
            stall_minutes=queue.config.stall_minutes,
            waiting_on=stall.waiting_on,
        )

    def forget(self, queue_id: QueueId) -> None:
        """This worker no longer holds the queue (or it was deleted)."""
        with self._lock:
            self._told.pop(queue_id, None)
            stalled = len(self._told)
        self._telemetry.queues_stalled(stalled)

    def _ended(
        self, queue: Queue, entries: Sequence[QueueEntry], told: _Told, *, name: str, now: datetime
    ) -> None:
        self.forget(queue.id)
        log.info(
            "queue no longer stalled",
            queue=name,
            minutes=round((now - told.since).total_seconds() / 60),
            since=told.since.isoformat(),
            because=_why_over(queue, entries, told.since),
        )


def _why_over(queue: Queue, entries: Sequence[QueueEntry], since: datetime) -> str:
    """Why a stall that began at `since` is over, in a few words."""
    progress = queue.stats.last_progress_at
    if progress is not None and progress > since:
        return "it moved on"
    if queue.config.stall_minutes <= 0:
        return "the stall report was turned off"
    if queue.state is QueueState.PAUSED:
        return "it was paused"
    if not counted_entries(queue, entries):
        return "it holds no PR any more"
    return "its clock started again (a PR left, or its settings changed)"


__all__ = ["StallWatch", "read_stall", "stall_facts"]
