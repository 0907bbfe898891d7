"""What the dashboard's merge-queue pages show: an org's queues at a glance, one queue with
its runs and waiting PRs, one PR's timeline. Reads only, each within the org's repositories.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from keepgreen.app.errors import InvalidInput, NotFound
from keepgreen.app.explain import reason_text
from keepgreen.app.lookup import find_entry, find_queue, find_repository
from keepgreen.app.ports import Clock, RunLogs, UnitOfWork, UnitOfWorkFactory
from keepgreen.app.pull_requests import ExplainedEntry, PullRequestService, QueueTarget
from keepgreen.app.queues import QueueService
from keepgreen.core.enums import PrState, StateReason
from keepgreen.core.ids import OrgId, PullRequestId, RepositoryId, TestRunId, is_uuid
from keepgreen.core.model import (
    CommitStatus,
    Queue,
    QueueEntry,
    QueueSnapshot,
    RepoRef,
    StateChange,
    TestRun,
)
from keepgreen.core.queue_analytics import QueueAnalytics, analytics
from keepgreen.core.queue_overview import OVERVIEW_WINDOW, QueueOverview, overview

LOG_SHOWN_BYTES = 1024 * 1024  # the end of a long log; the beginning is rarely the failure
MAX_ANALYTICS_PERIOD = timedelta(days=90)
RECENTLY_LEFT = timedelta(hours=24)  # the queue page shows the PRs that left since then
LEFT_SHOWN = 10
_LIVE = frozenset(state for state in PrState if not state.is_terminal)

# What a change to each state means, as the start of a timeline line.
_ARRIVED = {
    PrState.NOT_READY: "waits to be ready",
    PrState.PENDING: "waits for a test slot",
    PrState.TESTING: "testing",
    PrState.TESTS_PASSED: "tests passed",
    PrState.PENDING_FAILURE: "failed; waits to learn whether it is to blame",
    PrState.MERGED: "merged",
    PrState.FAILED: "left the queue: failed",
    PrState.CANCELLED: "left the queue: cancelled",
}


@dataclass(frozen=True, slots=True)
class QueueCard:
    """One queue on the queues page: its state and mode, live PRs by state, the last day."""

    repo: RepoRef
    queue: Queue
    live: dict[PrState, int]
    overview: QueueOverview

    @property
    def testing(self) -> int:
        return self.live.get(PrState.TESTING, 0)

    @property
    def waiting(self) -> int:
        return sum(n for state, n in self.live.items() if state is not PrState.TESTING)


@dataclass(frozen=True, slots=True)
class RunView:
    """A test run with the numbers of its PRs (in the order they are stacked) and the
    statuses CI reported for its commit.
    """

    run: TestRun
    numbers: tuple[int, ...]
    checks: tuple[CommitStatus, ...]


@dataclass(frozen=True, slots=True)
class QueueView:
    repo: RepoRef
    snapshot: QueueSnapshot
    runs: tuple[RunView, ...]  # open runs, oldest first
    not_ready: tuple[QueueEntry, ...]  # submitted, not admitted yet
    left: tuple[QueueEntry, ...]  # the last PRs that merged, failed or were cancelled
    now: datetime


@dataclass(frozen=True, slots=True)
class RunLog:
    """A run and the end of its built-in runner log (None: no log on this host)."""

    run: TestRun
    text: str | None


@dataclass(frozen=True, slots=True)
class TimelineStep:
    at: datetime
    state: PrState
    text: str  # the line in plain words
    run_id: TestRunId | None
    detail: str | None


@dataclass(frozen=True, slots=True)
class PullView:
    repo: RepoRef
    queue: Queue
    explained: ExplainedEntry
    timeline: tuple[TimelineStep, ...]  # oldest first
    runs: tuple[RunView, ...]  # every run that tested it, newest first
    now: datetime


# Changes whose reason is the whole story, said as one line.
_PLAIN = {
    (PrState.NOT_READY, StateReason.SUBMITTED): "submitted; waits to be ready",
    (PrState.PENDING, StateReason.SUBMITTED): "submitted; waits for a test slot",
    (PrState.PENDING, StateReason.READY): "ready; waits for a test slot",
    (PrState.TESTING, StateReason.TESTS_STARTED): "testing started",
    (PrState.TESTS_PASSED, StateReason.TESTS_PASSED): "tests passed; waits for the PRs ahead",
    (PrState.MERGED, StateReason.MERGED_BY_QUEUE): "merged by the queue",
    (PrState.MERGED, StateReason.MERGED_DIRECTLY): "merged directly: up to date, queue empty",
}


def timeline_text(
    change: StateChange,
    *,
    branch: str,
    number: int,
    run: TestRun | None = None,
    numbers: dict[PullRequestId, int] | None = None,
) -> str:
    """One change of PR `number` in plain words: where it went, and why; a run it started
    testing in says what it was tested on ("testing on main + #12, with #14").
    """
    if change.to_state is PrState.TESTING and run is not None:
        tested = [n for pr in run.tested_prs if (n := (numbers or {}).get(pr)) is not None]
        ahead = [link.number for link in run.chain if link.number not in tested]
        words = f"testing on {branch}" + "".join(f" + #{n}" for n in ahead)
        others = [n for n in tested if n != number]
        if others:
            words += ", with " + ", ".join(f"#{n}" for n in others)
        if change.reason is not StateReason.TESTS_STARTED:
            words += f" ({reason_text(change.reason.value)})"
        return words
    plain = _PLAIN.get((change.to_state, change.reason))
    if plain is not None:
        return plain
    return f"{_ARRIVED[change.to_state]}: {reason_text(change.reason.value)}"


class DashboardService:
    def __init__(
        self,
        uow: UnitOfWorkFactory,
        *,
        clock: Clock,
        queues: QueueService,
        pull_requests: PullRequestService,
        logs: RunLogs,
    ) -> None:
        self._uow = uow
        self._clock = clock
        self._queues = queues
        self._pull_requests = pull_requests
        self._logs = logs

    def now(self) -> datetime:
        """The service's clock, for pages that show times relative to now."""
        return self._clock()

    def queues(self, org_id: OrgId) -> list[QueueCard]:
        """Every queue of the org, by repository and branch."""
        now = self._clock()
        cards: list[QueueCard] = []
        with self._uow(read_only=True) as uow:
            repositories = {repo.id: repo for repo in uow.repositories.list_for_org(org_id)}
            queues = uow.queues.list_for_repositories(list(repositories))
            live = uow.entries.list_for_queues([q.id for q in queues], states=_LIVE)
            for queue in queues:
                counts: dict[PrState, int] = {}
                for entry in live:
                    if entry.queue_id == queue.id:
                        counts[entry.state] = counts.get(entry.state, 0) + 1
                history = uow.history.list_since([queue.id], now - OVERVIEW_WINDOW)
                cards.append(
                    QueueCard(
                        repositories[queue.repository_id].ref,
                        queue,
                        counts,
                        overview(history, now=now),
                    )
                )
        return sorted(cards, key=lambda card: (str(card.repo), card.queue.branch))

    def queue(self, org_id: OrgId, ref: RepoRef, branch: str) -> QueueView:
        """The queue as `getQueue` shows it, with its open runs and the PRs not yet ready."""
        snapshot = self._queues.get(org_id, ref, branch)
        now = self._clock()
        with self._uow(read_only=True) as uow:
            repository = find_repository(uow, org_id, ref)
            queue = find_queue(uow, repository, branch)
            live = uow.entries.list_for_queues([queue.id], states=_LIVE)
            numbers = {entry.id: entry.number for entry in live}
            runs = _run_views(uow, repository.id, uow.test_runs.list_open(queue.id), numbers)
            left = _left(uow, uow.history.list_since([queue.id], now - RECENTLY_LEFT))
        not_ready = tuple(entry for entry in live if entry.state is PrState.NOT_READY)
        ordered = tuple(sorted(runs, key=lambda view: view.run.created_at))
        return QueueView(ref, snapshot, ordered, not_ready, left, now)

    def pull_request(self, org_id: OrgId, ref: RepoRef, branch: str, number: int) -> PullView:
        """One PR of the queue: what it waits on or why it left, its history, its runs."""
        explained = self._pull_requests.get_explained(QueueTarget(org_id, ref, branch), number)
        with self._uow(read_only=True) as uow:
            repository = find_repository(uow, org_id, ref)
            queue = find_queue(uow, repository, branch)
            entry = find_entry(uow, queue, number)
            history = uow.history.list_for_entry(entry.id)
            run_ids = list(dict.fromkeys(c.test_run_id for c in history if c.test_run_id))
            runs = [run for rid in run_ids if (run := uow.test_runs.get(queue.id, rid))]
            members = {pr for run in runs for pr in run.tested_prs}
            numbers = {pr: uow.entries.get(pr).number for pr in members}
            views = _run_views(uow, repository.id, runs, numbers)
        by_id = {run.id: run for run in runs}
        steps = tuple(
            TimelineStep(
                change.at,
                change.to_state,
                timeline_text(
                    change,
                    branch=branch,
                    number=number,
                    run=by_id.get(change.test_run_id) if change.test_run_id else None,
                    numbers=numbers,
                ),
                change.test_run_id,
                change.detail,
            )
            for change in history
        )
        newest_first = tuple(sorted(views, key=lambda view: view.run.created_at, reverse=True))
        return PullView(ref, queue, explained, steps, newest_first, self._clock())

    def analytics(
        self, org_id: OrgId, ref: RepoRef, branch: str, *, start: datetime, end: datetime
    ) -> QueueAnalytics:
        """The queue's figures over [start, end): at most `MAX_ANALYTICS_PERIOD` long."""
        if end <= start:
            raise InvalidInput("invalid_field", "the period must end after it starts")
        if end - start > MAX_ANALYTICS_PERIOD:
            raise InvalidInput(
                "invalid_field",
                f"the period must be at most {MAX_ANALYTICS_PERIOD.days} days long",
            )
        with self._uow(read_only=True) as uow:
            queue = find_queue(uow, find_repository(uow, org_id, ref), branch)
            history = uow.history.list_since([queue.id], start)
        return analytics(history, start=start, end=end)

    def run_log(self, org_id: OrgId, ref: RepoRef, branch: str, run_id: str) -> RunLog:
        """The built-in runner's log of one of the queue's runs (404 for a run of another
        queue or org, as for one that does not exist).
        """
        with self._uow(read_only=True) as uow:
            queue = find_queue(uow, find_repository(uow, org_id, ref), branch)
            run = uow.test_runs.get(queue.id, TestRunId(run_id)) if is_uuid(run_id) else None
        if run is None:
            raise NotFound("test_run_not_found", f"no test run {run_id!r} in this queue")
        text = self._logs(run.id, limit_bytes=LOG_SHOWN_BYTES)
        return RunLog(run, None if text is None else text.decode("utf-8", errors="replace"))


def _left(uow: UnitOfWork, history: Sequence[StateChange]) -> tuple[QueueEntry, ...]:
    """The entries that last left the queue (newest first) and are still out of it."""
    latest: dict[PullRequestId, StateChange] = {}
    for change in history:
        latest[change.pull_request_id] = change
    gone = sorted(
        (change for change in latest.values() if change.to_state.is_terminal),
        key=lambda change: change.at,
        reverse=True,
    )
    return tuple(uow.entries.get(change.pull_request_id) for change in gone[:LEFT_SHOWN])


def _run_views(
    uow: UnitOfWork,
    repository_id: RepositoryId,
    runs: Sequence[TestRun],
    numbers: dict[PullRequestId, int],
) -> list[RunView]:
    views = []
    for run in runs:
        checks = () if run.sha is None else tuple(uow.statuses.list_for_sha(repository_id, run.sha))
        members = tuple(numbers[pr] for pr in run.tested_prs if pr in numbers)
        views.append(RunView(run, members, checks))
    return views
