"""What a queue's recent history says about its workload: CI time, failure rates, arrivals.

`keepgreen simulate --queue` reads it to simulate candidate settings on the queue's own figures.
Everything comes from the PRs' history lines (`StateChange`) of the window:

- a test run's CI time: from its PRs' `tests_started` to its `tests_passed` or `tests_failed`;
- the bad rate: of the PRs that left the queue merged or failed for their tests, the share that
  failed (a good PR ejected by a flaky failure counts as bad: an upper bound);
- the spurious-failure rate: of the finished runs, the share that failed although every PR it
  tested merged afterwards (a flake forgiven or tested again; a lower bound, as flakes that
  ejected their PR count as bad above);
- the arrival rate: PRs submitted per hour over the window.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from keepgreen.app.errors import InvalidInput, NotFound
from keepgreen.app.ports import Clock, UnitOfWork, UnitOfWorkFactory
from keepgreen.core.enums import PrState, StateReason
from keepgreen.core.ids import PullRequestId, QueueId, TestRunId, is_uuid
from keepgreen.core.model import Queue, QueueConfig, RepoRef, StateChange

_FAILED_FOR_TESTS = frozenset({StateReason.TESTS_FAILED, StateReason.TEST_RUN_TIMEOUT})


@dataclass(frozen=True, slots=True)
class QueueProfile:
    """A queue's workload as its history of the last `days` shows it."""

    queue: str  # host/owner/name:branch
    days: float
    config: QueueConfig
    runs: int  # finished test runs seen
    ci_minutes: float | None  # mean CI time of a run; None: no finished run
    ci_spread_minutes: float  # its standard deviation
    run_failure_rate: float
    bad_rate: float
    spurious_rate: float
    submitted: int
    merged: int
    failed: int
    arrivals_per_hour: float


class QueueHistoryService:
    def __init__(self, uow: UnitOfWorkFactory, *, clock: Clock) -> None:
        self._uow = uow
        self._clock = clock

    def profile(self, queue: str, *, days: float, org_slug: str | None = None) -> QueueProfile:
        """The profile of `queue` (`HOST/OWNER/NAME:BRANCH`, `HOST/OWNER/NAME/BRANCH` or the
        queue's id) over its last `days` days.
        """
        if days <= 0:
            raise InvalidInput("invalid_field", "days must be more than 0")
        now = self._clock()
        since = now - timedelta(days=days)
        with self._uow() as uow:
            found, name = _find_queue(uow, queue, org_slug)
            history = uow.history.list_since([found.id], since)
        return profile_of(history, queue=name, config=found.config, days=days)


def profile_of(
    history: Sequence[StateChange], *, queue: str, config: QueueConfig, days: float
) -> QueueProfile:
    """The profile from the history lines of one queue over `days` days (see the module)."""
    started: dict[TestRunId, datetime] = {}
    finished: dict[TestRunId, tuple[datetime, bool]] = {}  # run -> (when, failed)
    tested: dict[TestRunId, set[PullRequestId]] = {}
    ended: dict[PullRequestId, tuple[PrState, StateReason]] = {}
    submitted = 0
    for change in sorted(history, key=lambda c: c.at):
        run = change.test_run_id
        if change.to_state is PrState.NOT_READY and change.reason is StateReason.SUBMITTED:
            submitted += 1
        if run is not None and change.to_state is PrState.TESTING:
            started.setdefault(run, change.at)
            tested.setdefault(run, set()).add(change.pull_request_id)
        if run is not None and run not in finished:
            if change.reason is StateReason.TESTS_PASSED:
                finished[run] = (change.at, False)
            elif change.to_state is PrState.PENDING_FAILURE and change.reason in _FAILED_FOR_TESTS:
                finished[run] = (change.at, True)
        if change.to_state.is_terminal:
            ended[change.pull_request_id] = (change.to_state, change.reason)
    minutes = [
        (at - started[run]).total_seconds() / 60
        for run, (at, _) in finished.items()
        if run in started
    ]
    merged = sum(1 for state, _ in ended.values() if state is PrState.MERGED)
    failed = sum(
        1
        for state, reason in ended.values()
        if state is PrState.FAILED and reason in _FAILED_FOR_TESTS
    )
    failed_runs = [run for run, (_, failed_) in finished.items() if failed_]
    forgiven = [
        run
        for run in failed_runs
        if tested.get(run)
        and all(ended.get(pr, (None, None))[0] is PrState.MERGED for pr in tested[run])
    ]
    runs = len(finished)
    return QueueProfile(
        queue=queue,
        days=days,
        config=config,
        runs=runs,
        ci_minutes=statistics.fmean(minutes) if minutes else None,
        ci_spread_minutes=statistics.pstdev(minutes) if len(minutes) > 1 else 0.0,
        run_failure_rate=len(failed_runs) / runs if runs else 0.0,
        bad_rate=failed / (merged + failed) if merged + failed else 0.0,
        spurious_rate=len(forgiven) / runs if runs else 0.0,
        submitted=submitted,
        merged=merged,
        failed=failed,
        arrivals_per_hour=submitted / (days * 24),
    )


def _find_queue(uow: UnitOfWork, reference: str, org_slug: str | None) -> tuple[Queue, str]:
    reference = reference.strip()
    if is_uuid(reference):
        queue = uow.queues.get(QueueId(reference))
        if queue is None:
            raise NotFound("queue_not_found", f"no queue has the id {reference}")
        repository = uow.repositories.get(queue.repository_id)
        return queue, f"{repository.ref}:{queue.branch}"
    repo_part, colon, branch = reference.partition(":")
    parts = repo_part.split("/")
    if not colon:
        parts, branch = parts[:3], "/".join(parts[3:])
    if len(parts) != 3 or not all(parts) or not branch:
        raise InvalidInput(
            "invalid_field",
            f"queue {reference!r} is not HOST/OWNER/NAME:BRANCH (or a queue id), "
            "e.g. github.com/acme/widgets:main",
        )
    ref = RepoRef(*parts)
    candidates = list(uow.repositories.with_ref(ref))
    if org_slug is not None:
        org = uow.orgs.get_by_slug(org_slug)
        candidates = [r for r in candidates if org is not None and r.org_id == org.id]
    if not candidates:
        raise NotFound("repository_not_found", f"repository {ref} is not registered")
    if len(candidates) > 1:
        raise InvalidInput(
            "ambiguous_repository",
            f"repository {ref} is registered by several orgs; say which with --org",
        )
    queue = uow.queues.find(candidates[0].id, branch)
    if queue is None:
        raise NotFound(
            "queue_not_found", f"repository {ref} has no merge queue for branch {branch!r}"
        )
    return queue, f"{ref}:{branch}"


__all__ = ["QueueHistoryService", "QueueProfile", "profile_of"]
