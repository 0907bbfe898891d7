"""A queue's git server faults, as the worker meets them: recorded, backed off, and ended.

A fault is an event in the queue's incident history (`uow.incidents`), shown by `getQueue`,
`getSubmittedPullRequest`, `keepgreen queue show` and `keepgreen status`, counted in the
metrics, and told in the log once and then with reminders (`Outages`). A queue whose server
fails is not tried again at every pass: it waits 1, 2, 4, ... seconds (at most
`max_backoff`) between attempts, while the worker goes on with every other queue, and it
resumes by itself at the first attempt that succeeds.

Faults of reaching the server (unreachable, timeout, refused credentials, ...) end when a pass
reads the server again; a branch missing on the server ends when it is back; a push the server
refused ends when a later effect succeeds; a rewound branch and a refused landing are events
that end as they are recorded (the queue re-tests, the PR leaves).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import timedelta

import structlog

from keepgreen.app.outages import Notice, Outages
from keepgreen.app.ports import Clock, CodeHostError, UnitOfWorkFactory
from keepgreen.app.telemetry import Telemetry
from keepgreen.core.enums import SERVER_INCIDENTS, IncidentKind
from keepgreen.core.ids import QueueId
from keepgreen.core.model import Incident, QueueEntry

log = structlog.get_logger("keepgreen.worker")

FIRST_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 30.0
# How many of a queue's incidents `getQueue` and `keepgreen queue show` list, and for how
# long after it ended an incident is still listed.
SHOWN_INCIDENTS = 20
INCIDENTS_SHOWN_FOR = timedelta(days=1)


def concerning(incidents: Sequence[Incident], entry: QueueEntry) -> tuple[Incident, ...]:
    """The incidents that concern `entry` in its current episode: those of its queue's server
    or of this PR, open now or ended since it was submitted.
    """
    return tuple(
        incident
        for incident in incidents
        if incident.pr_number in (None, entry.number)
        and (incident.ended_at is None or incident.ended_at >= entry.submitted_at)
    )


@dataclass(slots=True)
class _Backoff:
    failures: int
    retry_at: float


# The longest a host's "retry after" is obeyed (GitHub's hourly limit resets within the hour).
MAX_RETRY_AFTER_SECONDS = 3600.0


class HostIncidents:
    """The worker's record of its queues' git server faults (one per worker process)."""

    def __init__(
        self,
        uow: UnitOfWorkFactory,
        *,
        clock: Clock,
        telemetry: Telemetry,
        monotonic: Callable[[], float] = time.monotonic,
        max_backoff: float = MAX_BACKOFF_SECONDS,
    ) -> None:
        self._uow = uow
        self._clock = clock
        self._telemetry = telemetry
        self._monotonic = monotonic
        self._max_backoff = max_backoff
        self._outages = Outages(now=monotonic)
        self._backoff: dict[QueueId, _Backoff] = {}
        # Queues that may have open incidents: those that failed here, and those just taken
        # over (a worker that died may have left some open).
        self._maybe_open: set[QueueId] = set()
        self._waiting: set[QueueId] = set()  # queues whose server (or branch) keeps them waiting
        self._lock = threading.Lock()

    # -- when to try ------------------------------------------------------------------------

    def may_try(self, queue_id: QueueId) -> bool:
        """Whether the queue's backoff, if any, has run out."""
        with self._lock:
            backoff = self._backoff.get(queue_id)
        return backoff is None or self._monotonic() >= backoff.retry_at

    def adopt(self, queue_id: QueueId) -> None:
        """This worker took the queue over: incidents another worker left open are its own."""
        with self._lock:
            self._maybe_open.add(queue_id)

    def forget(self, queue_id: QueueId) -> None:
        """This worker no longer holds the queue."""
        with self._lock:
            self._backoff.pop(queue_id, None)
            self._waiting.discard(queue_id)
        self._telemetry.queues_waiting_on_git_host(len(self._waiting))

    # -- faults -----------------------------------------------------------------------------

    def read_failed(self, queue_id: QueueId, name: str, error: CodeHostError) -> None:
        """A pass could not read the queue's server: record it, back off, and say so."""
        self._record(queue_id, error.kind, str(error))
        self._back_off(queue_id, at_least=error.retry_after)
        self._set_waiting(queue_id, waiting=True)
        notice = self._outages.failed(name)
        if notice is Notice.STARTED:
            log.warning(
                "git server failing; the queue waits",
                queue=name,
                kind=error.kind.value,
                error=str(error),
            )
        elif notice is Notice.REMINDER:
            log.warning(
                "git server still failing; the queue waits",
                queue=name,
                kind=error.kind.value,
                error=str(error),
                seconds_down=round(self._outages.seconds_down(name)),
                failed_passes=self._outages.failures(name),
            )

    def read_succeeded(self, queue_id: QueueId, name: str) -> None:
        """A pass read the server: faults of reaching it are over."""
        if self._outages.failures(name):
            down = self._outages.seconds_down(name)
            self._outages.succeeded(name)
            log.info("git server answering again", queue=name, seconds_down=round(down))
        self._clear_backoff(queue_id)
        self._set_waiting(queue_id, waiting=False)
        self._close(queue_id, SERVER_INCIDENTS)

    def effect_failed(
        self, queue_id: QueueId, error: CodeHostError, *, pr_number: int | None = None
    ) -> None:
        """An effect (a push, a landing) failed at the server: record it and back off."""
        self._record(queue_id, error.kind, str(error), pr_number=pr_number)
        self._back_off(queue_id, at_least=error.retry_after)

    def effect_succeeded(self, queue_id: QueueId) -> None:
        """An effect went through: pushes are accepted again."""
        self._clear_backoff(queue_id)
        self._close(queue_id, (IncidentKind.PUSH_REJECTED,))

    def branch_missing(self, queue_id: QueueId, name: str, branch: str, url: str) -> None:
        """The queue's branch is not on the server: the queue waits until it is back."""
        message = (
            f"the branch {branch} does not exist on git-url {url}; the queue waits until it is "
            "pushed again"
        )
        if self._record(queue_id, IncidentKind.TARGET_BRANCH_MISSING, message) == 1:
            log.warning("target branch missing; the queue waits", queue=name, branch=branch)
        self._back_off(queue_id)
        self._set_waiting(queue_id, waiting=True)

    def branch_present(self, queue_id: QueueId, name: str) -> None:
        """The queue's branch is on the server (again)."""
        ended = self._close(queue_id, (IncidentKind.TARGET_BRANCH_MISSING,))
        if ended:
            log.info("target branch back; the queue resumes", queue=name)

    def branch_rewound(
        self, queue_id: QueueId, name: str, *, branch: str, old: str, new: str
    ) -> None:
        """Someone force-pushed the branch back to an older commit (an event: runs re-test)."""
        message = (
            f"the branch {branch} was force-pushed back from {old[:12]} to {new[:12]}; what "
            "was tested on it is tested again"
        )
        self._event(queue_id, IncidentKind.TARGET_BRANCH_REWOUND, message)
        log.warning("target branch rewound", queue=name, branch=branch, old=old, new=new)

    def landing_rejected(self, queue_id: QueueId, *, number: int, detail: str) -> None:
        """The server refused to land PR `number` (an event: the PR leaves with this answer)."""
        self._event(queue_id, IncidentKind.PUSH_REJECTED, detail, pr_number=number)

    # -- bookkeeping ------------------------------------------------------------------------

    def _record(
        self, queue_id: QueueId, kind: IncidentKind, message: str, *, pr_number: int | None = None
    ) -> int:
        """Count a failure in the queue's open incident of `kind`; its failures so far."""
        self._telemetry.git_host_failed(kind)
        with self._lock:
            self._maybe_open.add(queue_id)
        with self._uow() as uow:
            if uow.queues.get(queue_id) is None:
                return 0  # deleted meanwhile
            incident = uow.incidents.record(
                queue_id, kind, message, now=self._clock(), pr_number=pr_number
            )
            uow.commit()
        return incident.failures

    def _event(
        self, queue_id: QueueId, kind: IncidentKind, message: str, *, pr_number: int | None = None
    ) -> None:
        self._telemetry.git_host_failed(kind)
        now = self._clock()
        with self._uow() as uow:
            if uow.queues.get(queue_id) is None:
                return
            uow.incidents.record(queue_id, kind, message, now=now, pr_number=pr_number)
            uow.incidents.close(queue_id, now=now, kinds=(kind,), pr_number=pr_number)
            uow.commit()

    def _close(self, queue_id: QueueId, kinds: Collection[IncidentKind]) -> int:
        with self._lock:
            if queue_id not in self._maybe_open:
                return 0
        with self._uow() as uow:
            ended = uow.incidents.close(queue_id, now=self._clock(), kinds=kinds)
            still_open = uow.incidents.list_open([queue_id])
            uow.commit()
        if not still_open:
            with self._lock:
                self._maybe_open.discard(queue_id)
        return len(ended)

    def _back_off(self, queue_id: QueueId, *, at_least: float | None = None) -> None:
        """Wait 1, 2, 4, ... seconds up to the maximum, or as long as the host asked (a rate
        limit's Retry-After, at most an hour).
        """
        with self._lock:
            failures = self._backoff[queue_id].failures + 1 if queue_id in self._backoff else 1
            first = min(FIRST_BACKOFF_SECONDS, self._max_backoff)
            delay = min(first * 2 ** (failures - 1), self._max_backoff)
            if at_least is not None:
                delay = max(delay, min(at_least, MAX_RETRY_AFTER_SECONDS))
            self._backoff[queue_id] = _Backoff(failures, self._monotonic() + delay)

    def _clear_backoff(self, queue_id: QueueId) -> None:
        with self._lock:
            self._backoff.pop(queue_id, None)

    def _set_waiting(self, queue_id: QueueId, *, waiting: bool) -> None:
        with self._lock:
            if waiting:
                self._waiting.add(queue_id)
            else:
                self._waiting.discard(queue_id)
            count = len(self._waiting)
        self._telemetry.queues_waiting_on_git_host(count)


__all__ = ["INCIDENTS_SHOWN_FOR", "SHOWN_INCIDENTS", "HostIncidents", "concerning"]
