"""Whether a queue is stalled, since when, and what it waits on, in one sentence.

A queue stalls when it holds PRs and neither started a test run nor merged a PR for
`stall_minutes`. Its stall clock starts at the latest of: its last progress (the scheduler's
`stats.last_progress_at`), the submission of the oldest PR it holds (a queue that was empty
is not stalled the moment it gets a PR), and its last change by `updateQueue` (a queue just
resumed starts its clock again). A paused queue is never stalled: it waits on purpose, and
says so instead. A draining queue admits nothing, so the not-ready PRs it holds do not count.

Pure: the app reads the facts, this module judges them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from keepgreen.core.enums import (
    CommitState,
    Mergeability,
    PrState,
    QueueState,
    TestRunKind,
    TestRunStatus,
)
from keepgreen.core.model import CommitStatus, Incident, Queue, QueueEntry, TestRun
from keepgreen.core.ordering import queue_order

# The states in which a queue means to go on: a paused queue waits on purpose.
_MOVING = frozenset({QueueState.RUNNING, QueueState.DRAINING, QueueState.SWITCHING_MODES})

_UNDER_WAY = frozenset({TestRunStatus.IN_PROGRESS, TestRunStatus.QUEUED})

PAUSED = "the queue is paused: it starts no test run and merges nothing until it is resumed"
NO_REQUIRED_CHECK = "no required status check is configured"


@dataclass(frozen=True, slots=True)
class StallFacts:
    """What a queue's stall is judged from.

    `entries`: its live (not terminal) entries, in any order. `runs`: its open test runs.
    `statuses`: the commit statuses of the open runs' heads, by sha then context.
    `required`: the checks the queue requires now (of the PRs not yet under test).
    `incidents`: its open git server incidents. `landing`: the PRs whose landing is under way.
    `host`: the code host's name when it says what is mergeable ("GitHub"); None when
    keepgreen works it out from git itself.
    """

    queue: Queue
    entries: tuple[QueueEntry, ...]
    runs: tuple[TestRun, ...] = ()
    statuses: Mapping[str, Mapping[str, CommitStatus]] = field(default_factory=dict)
    required: tuple[str, ...] = ()
    incidents: tuple[Incident, ...] = ()
    landing: tuple[int, ...] = ()
    host: str | None = None


@dataclass(frozen=True, slots=True)
class Stall:
    """A queue's standing: `since` is set while it is stalled (the start of its stall clock);
    `waiting_on` says in one sentence what keeps it from going on (when it is stalled, paused
    with PRs in it, or has an open git server incident), else None.
    """

    since: datetime | None = None
    waiting_on: str | None = None

    @property
    def is_stalled(self) -> bool:
        return self.since is not None

    def seconds(self, now: datetime) -> float:
        """How long the queue has gone without progress; 0 when it is not stalled."""
        if self.since is None:
            return 0.0
        return max((now - self.since).total_seconds(), 0.0)


def counted_entries(queue: Queue, entries: Iterable[QueueEntry]) -> tuple[QueueEntry, ...]:
    """The PRs a stall is about: the admitted ones, and the submitted not-ready ones of a
    running queue (a draining queue admits none, on purpose).
    """
    return tuple(
        entry
        for entry in entries
        if entry.state.is_admitted
        or (
            entry.state is PrState.NOT_READY
            and entry.is_submitted
            and queue.state is QueueState.RUNNING
        )
    )


def stall_clock(queue: Queue, entries: Iterable[QueueEntry]) -> datetime | None:
    """When the queue's stall clock started; None when it cannot stall now (the report is
    off, the queue is paused, or it holds no PR).
    """
    counted = counted_entries(queue, entries)
    if queue.config.stall_minutes <= 0 or queue.state not in _MOVING or not counted:
        return None
    starts = [min(entry.submitted_at for entry in counted), queue.updated_at]
    if queue.stats.last_progress_at is not None:
        starts.append(queue.stats.last_progress_at)
    return max(starts)


def stalled_since(queue: Queue, entries: Iterable[QueueEntry], *, now: datetime) -> datetime | None:
    """The start of the queue's stall, or None when it is not stalled at `now`."""
    started = stall_clock(queue, entries)
    if started is None or now - started < timedelta(minutes=queue.config.stall_minutes):
        return None
    return started


def assess(facts: StallFacts, *, now: datetime) -> Stall:
    """Whether the queue is stalled at `now`, and what it waits on (see `Stall`)."""
    queue = facts.queue
    since = stalled_since(queue, facts.entries, now=now)
    if since is not None:
        return Stall(since, waiting_on(facts, now=now))
    incident = _server_incident(facts.incidents)
    if incident is not None:
        return Stall(None, incident.message)
    holds = any(e.state.is_admitted or e.is_submitted for e in facts.entries)
    if queue.state is QueueState.PAUSED and holds:
        return Stall(None, PAUSED)
    return Stall()


def waiting_on(facts: StallFacts, *, now: datetime) -> str:
    """What the queue waits on, in one sentence: its git server's open incident, its pause,
    a landing under way, else the front PR of the queue (its run's silent checks, a batch
    forming, nothing to test it with), else its first not-ready PR.
    """
    incident = _server_incident(facts.incidents)
    if incident is not None:
        return incident.message
    queue = facts.queue
    if queue.state is QueueState.PAUSED:
        return PAUSED
    if facts.landing:
        return _landing(facts, facts.landing[0])
    holding = frozenset(entry_id for run in facts.runs for entry_id in run.members)
    order = queue_order(facts.entries, holding=holding)
    if order:
        return _front(facts, order, now=now)
    not_ready = sorted(
        (e for e in facts.entries if e.state is PrState.NOT_READY and e.is_submitted),
        key=lambda e: (e.position, e.id),
    )
    if not_ready:
        return _not_ready(facts, not_ready[0])
    return "nothing: the queue holds no PR"


def _server_incident(incidents: Sequence[Incident]) -> Incident | None:
    """The newest open incident of the queue's git server (not of one PR's ref)."""
    open_ = [i for i in incidents if i.is_open and i.pr_number is None]
    return max(open_, key=lambda i: i.started_at) if open_ else None


def _landing(facts: StallFacts, number: int) -> str:
    refused = [i for i in facts.incidents if i.is_open and i.pr_number == number]
    if refused:
        return f"landing PR #{number}, which the git server refused: {refused[-1].message}"
    return f"landing PR #{number}"


def _front(facts: StallFacts, order: Sequence[QueueEntry], *, now: datetime) -> str:
    """What the front PR of the queue waits on."""
    entry = order[0]
    run = _run_of(entry, facts.runs)
    if run is not None and run.status is TestRunStatus.QUEUED:
        return (
            f"PR #{entry.number} waits for a bisection slot "
            f"(bisectionConcurrency {facts.queue.config.bisection_concurrency})"
        )
    if run is not None and run.status is TestRunStatus.IN_PROGRESS:
        if entry.state is PrState.PENDING_FAILURE:
            # Its own run failed; whether it is to blame waits on the run behind it.
            return (
                f"PR #{entry.number} failed its tests and waits on the run behind it: "
                + _testing(facts, run, now=now)
            )
        return _testing(facts, run, now=now)
    match entry.state:
        case PrState.PENDING:
            return _pending(facts, entry, order, now=now)
        case PrState.TESTS_PASSED:
            return f"PR #{entry.number} passed its tests and waits to land"
        case PrState.PENDING_FAILURE:
            return f"PR #{entry.number} failed its tests and waits to learn which PR broke them"
        case _:
            return f"PR #{entry.number} is {entry.state.value.replace('_', ' ')}"


def _testing(facts: StallFacts, run: TestRun, *, now: datetime) -> str:
    numbers = {e.id: e.number for e in facts.entries}
    tested = [numbers[i] for i in run.tested_prs if i in numbers]
    if len(tested) == 1:
        subject = f"PR #{tested[0]} is"
    else:
        subject = "PRs " + ", ".join(f"#{n}" for n in tested) + " are"
    kind = " (bisection)" if run.kind is TestRunKind.BISECTION else ""
    since = run.started_at or run.created_at
    head = f"{subject} testing in run {run.id}{kind} since {_clock(since, now)}"
    if run.sha is None:
        return f"{head}, waiting for its test commit to be built"
    reported = facts.statuses.get(run.sha, {})
    silent = [c for c in run.required_statuses if c not in reported]
    pending = [
        reported[c]
        for c in run.required_statuses
        if c in reported and reported[c].state is CommitState.PENDING
    ]
    parts = []
    if silent:
        which = "which has" if len(silent) == 1 else "which have"
        parts.append(f"{_names(silent)}, {which} not reported")
    parts.extend(f"{s.context}, pending since {_clock(s.updated_at, now)}" for s in pending)
    if not parts:
        return head
    return f"{head}, waiting on " + "; and on ".join(parts)


def _pending(
    facts: StallFacts, entry: QueueEntry, order: Sequence[QueueEntry], *, now: datetime
) -> str:
    queue = facts.queue
    config = queue.config
    if not facts.required:
        return NO_REQUIRED_CHECK
    if queue.target_sha is None:
        return f"the queue has not read its branch {queue.branch} yet"
    if config.batch and not entry.no_batch:
        forming = [
            e
            for e in order
            if e.state is PrState.PENDING and not e.no_batch and _run_of(e, facts.runs) is None
        ]
        if len(forming) < config.batching_min_size:
            oldest = min(e.state_changed_at for e in forming)
            deadline = oldest + timedelta(minutes=config.batching_max_wait_time_minutes)
            return (
                f"a batch is forming: {len(forming)} of {config.batching_min_size} PRs, "
                f"tested by {_clock(deadline, now)} at the latest"
            )
    return f"PR #{entry.number} is pending and no test run has started for it"


def _not_ready(facts: StallFacts, entry: QueueEntry) -> str:
    readiness = entry.readiness
    branch = facts.queue.branch
    head = f"PR #{entry.number} is not ready: "
    if not readiness.does_base_branch_match:
        return head + f"it is not based on {branch}"
    match readiness.mergeability:
        case Mergeability.NOT_MERGEABLE:
            if facts.host is not None:
                return head + f"{facts.host} does not call it mergeable"
            return head + f"it does not merge cleanly onto {branch}"
        case Mergeability.UNSPECIFIED | Mergeability.IN_PROGRESS:
            if facts.host is not None:
                return head + f"{facts.host} has not said yet whether it is mergeable"
            return head + f"whether it merges cleanly onto {branch} is not known yet"
        case Mergeability.MERGEABLE:
            pass
    if readiness.requires_impacted_targets and not readiness.has_impacted_targets:
        return head + "its impacted targets were not uploaded (the queue runs in parallel mode)"
    return head.removesuffix(": ")


def _run_of(entry: QueueEntry, runs: Sequence[TestRun]) -> TestRun | None:
    """The newest run under way (testing, or queued for a bisection slot) that tests `entry`,
    else the newest under way that holds it as a PR ahead.
    """
    for group in (
        [run for run in runs if entry.id in run.tested_prs],
        [run for run in runs if entry.id in run.dependent_prs],
    ):
        under_way = [run for run in group if run.status in _UNDER_WAY]
        if under_way:
            return max(under_way, key=lambda run: run.created_at)
    return None


def _names(contexts: Sequence[str]) -> str:
    if len(contexts) == 1:
        return contexts[0]
    return ", ".join(contexts[:-1]) + " and " + contexts[-1]


def _clock(moment: datetime, now: datetime) -> str:
    """A time of day in UTC, with the date when it is not today's."""
    moment, now = moment.astimezone(UTC), now.astimezone(UTC)
    if moment.date() == now.date():
        return moment.strftime("%H:%M UTC")
    return moment.strftime("%Y-%m-%d %H:%M UTC")


__all__ = [
    "NO_REQUIRED_CHECK",
    "PAUSED",
    "Stall",
    "StallFacts",
    "assess",
    "counted_entries",
    "stall_clock",
    "stalled_since",
    "waiting_on",
]
