"""The facts an explanation is rendered from, read from the store: one PR's (its place in
line, its run and the run's statuses, the run that verified it, the bisection it was part of),
or those of a whole queue for the GitHub App's check runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from keepgreen.app.engine import live_entries
from keepgreen.app.explain import Bisection, Facts
from keepgreen.app.ports import UnitOfWork
from keepgreen.core.enums import PrState, StateReason
from keepgreen.core.ids import PullRequestId, TestRunId
from keepgreen.core.model import CommitStatus, Queue, QueueEntry, Repository, TestRun
from keepgreen.core.ordering import queue_order

# Reasons of a waiting PR that the admission records without a detail: no history to read.
_PLAIN = frozenset({StateReason.SUBMITTED, StateReason.READY})


def queue_facts(
    uow: UnitOfWork,
    queue: Queue,
    repository: Repository,
    now: datetime,
    *,
    left_within: timedelta,
) -> list[Facts]:
    """The facts of every PR in the queue, and of each that left it within `left_within`."""
    live = list(live_entries(uow, queue.id))
    runs = list(uow.test_runs.list_open(queue.id))
    holding = frozenset(entry_id for run in runs for entry_id in run.members)
    order = [entry.id for entry in queue_order(live, holding=holding)]
    # The last run of each PR that changed lately: a PR that left names the run that
    # decided it (its CI link, a bisection's verdict).
    last_run: dict[PullRequestId, TestRunId] = {}
    runs_of: dict[PullRequestId, list[TestRunId]] = {}
    detail: dict[PullRequestId, str | None] = {}
    for change in uow.history.list_since([queue.id], now - left_within):
        detail[change.pull_request_id] = change.detail
        if change.test_run_id is not None:
            last_run[change.pull_request_id] = change.test_run_id
            runs_of.setdefault(change.pull_request_id, []).append(change.test_run_id)
        else:
            last_run.setdefault(change.pull_request_id, TestRunId(""))
    known = {entry.id for entry in live}
    left = [
        entry
        for entry in (uow.entries.get(entry_id) for entry_id in last_run.keys() - known)
        if entry.state.is_terminal and entry.state_changed_at >= now - left_within
    ]
    # A PR that left names the culprits of a bisection it was part of: one read finds which
    # of them were in one, and only those read the bisection's failed runs.
    roots = uow.test_runs.bisection_roots([r for entry in left for r in runs_of.get(entry.id, ())])
    facts = [
        _facts_of(
            uow,
            repository,
            entry,
            runs=runs,
            order=order,
            decided_by=last_run.get(entry.id),
            now=now,
            detail=detail.get(entry.id),
        )
        for entry in (*live, *left)
    ]
    return [
        replace(
            fact, bisection=_bisection(uow, fact.entry, _in_order(runs_of[fact.entry.id], roots))
        )
        if fact.entry.state.is_terminal and fact.entry.id in runs_of
        else fact
        for fact in facts
    ]


def entry_facts(
    uow: UnitOfWork, queue: Queue, repository: Repository, entry: QueueEntry, now: datetime
) -> Facts:
    """The facts of one PR of the queue, in it or gone from it, with the evidence: a few reads
    of this PR's history and runs, never the whole queue's (its place in line reads only what
    orders the queue).
    """
    runs = list(uow.test_runs.list_open(queue.id))
    order: list[PullRequestId] = []
    decided_by = None
    history_runs: list[TestRunId] = []
    detail = None
    if entry.state.is_terminal:
        changes = uow.history.list_for_entry(entry.id)
        history_runs = [c.test_run_id for c in changes if c.test_run_id]
        decided_by = history_runs[-1] if history_runs else None
        detail = changes[-1].detail if changes else None
    else:
        if entry.state.is_admitted:
            holding = frozenset(entry_id for run in runs for entry_id in run.members)
            placed = uow.entries.placed(queue.id)
            order = [each.id for each in queue_order(placed, holding=holding)]
        if entry.state_reason not in _PLAIN:
            last = uow.history.last_for_entry(entry.id)
            detail = last.detail if last is not None else None
    facts = _facts_of(
        uow,
        repository,
        entry,
        runs=runs,
        order=order,
        decided_by=decided_by,
        now=now,
        detail=detail,
    )
    # The bisections it was part of: those of its history's runs once it left, else that
    # of the run that tests it now.
    if history_runs:
        roots = _in_order(history_runs, uow.test_runs.bisection_roots(history_runs))
    else:
        roots = [facts.run.bisection_root] if facts.run and facts.run.bisection_root else []
    return replace(facts, bisection=_bisection(uow, entry, roots))


def _in_order(
    run_ids: Sequence[TestRunId], roots: Mapping[TestRunId, TestRunId]
) -> list[TestRunId]:
    """The bisections `run_ids` (a PR's history, oldest first) belong to, oldest first."""
    return list(dict.fromkeys(roots[run_id] for run_id in run_ids if run_id in roots))


def _bisection(uow: UnitOfWork, entry: QueueEntry, roots: Sequence[TestRunId]) -> Bisection | None:
    """What the bisections of `roots` (failed batch runs, oldest first) found: each PR that a
    run of one PR failed and that left the queue as failed is a culprit.
    """
    if not roots:
        return None
    failed = uow.test_runs.list_failed_in_bisections(entry.queue_id, roots)
    batch_order = [pr for run in failed if run.id in roots for pr in run.tested_prs]
    alone: dict[PullRequestId, TestRunId] = {
        run.tested_prs[0]: run.id
        for run in failed
        if len(run.tested_prs) == 1 and run.id not in roots
    }
    culprits: list[int] = []
    for pr in sorted(alone, key=lambda pr: batch_order.index(pr) if pr in batch_order else 0):
        suspect = entry if pr == entry.id else uow.entries.get(pr)
        if suspect.state is PrState.FAILED:
            culprits.append(suspect.number)
    isolating = alone.get(entry.id) if entry.number in culprits else None
    return Bisection(roots[-1], isolating, tuple(culprits))


def _facts_of(
    uow: UnitOfWork,
    repository: Repository,
    entry: QueueEntry,
    *,
    runs: Sequence[TestRun],
    order: Sequence[PullRequestId],
    decided_by: TestRunId | None,
    now: datetime,
    detail: str | None = None,
) -> Facts:
    """`entry`'s facts: its open run (or, once it left, the run that decided it), that run's
    statuses, the run that verified it, and its place in `order`.
    """
    run = _run_of(entry, runs)
    if run is None and entry.state.is_terminal and decided_by:
        run = uow.test_runs.get(entry.queue_id, decided_by)
    passed_run = None
    if (verifier := entry.verified_by_test_run) is not None:
        known = {each.id: each for each in (*runs, *([run] if run else []))}
        passed_run = known.get(verifier) or uow.test_runs.get(entry.queue_id, verifier)
    statuses: dict[str, CommitStatus] = {}
    if run is not None and run.sha is not None:
        statuses = {
            status.context: status for status in uow.statuses.list_for_sha(repository.id, run.sha)
        }
    stored = uow.github_feedback.get(repository.id, entry.number)
    return Facts(
        entry=entry,
        position=order.index(entry.id) + 1 if entry.id in order else None,
        queued=len(order),
        run=run,
        statuses=statuses,
        required=run.required_statuses if run is not None else (),
        merged_sha=stored.merged_sha if stored else None,
        now=now,
        passed_run=passed_run,
        detail=detail,
    )


def _run_of(entry: QueueEntry, runs: Sequence[TestRun]) -> TestRun | None:
    """The newest open run that tests `entry` (or, failing that, holds it as a dependent)."""
    testing = [run for run in runs if entry.id in run.tested_prs]
    holding = [run for run in runs if entry.id in run.members]
    chosen = testing or holding
    return max(chosen, key=lambda run: run.created_at) if chosen else None


__all__ = ["entry_facts", "queue_facts"]
