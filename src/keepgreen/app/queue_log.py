"""The queue's story in the log: one line per decision an operator would want to read.

`log_decision` turns what one `decide` call changed into log lines: a PR submitted, a run
started on which predicted branch, a run's result, a PR merged as which commit, a PR failed
or cancelled and why. It is called after the decision's transaction commits, so the log
never tells of a change that a rollback undid. Every line carries the queue
(`host/owner/name:branch`) and the ids it is about (`pr`, `run`, `sha`, `reason`).
"""

from __future__ import annotations

import structlog

from keepgreen.core.enums import PrState, StateReason, TestRunStatus
from keepgreen.core.ids import PullRequestId
from keepgreen.core.model import QueueEntry, RepoRef, Repository, StateChange, TestRun
from keepgreen.core.scheduler import Decision, EngineState, Event, Landed, TargetBranchMoved, Tick

log = structlog.get_logger("keepgreen.queue")

# A state change to one of these is told by its own event name; the rest as "pr state changed".
_EVENT_BY_STATE = {
    PrState.TESTING: "pr testing",
    PrState.TESTS_PASSED: "pr passed",
    PrState.PENDING_FAILURE: "pr failure pending",
    PrState.MERGED: "pr merged",
    PrState.FAILED: "pr failed",
    PrState.CANCELLED: "pr cancelled",
}


_ENTERING = frozenset({StateReason.SUBMITTED, StateReason.READY})


def queue_name(repository: Repository | RepoRef, branch: str) -> str:
    """How log lines name a queue: `github.com/acme/app:main`."""
    ref = repository.ref if isinstance(repository, Repository) else repository
    return f"{ref}:{branch}"


def log_decision(
    repository: Repository, before: EngineState, event: Event, decision: Decision
) -> None:
    """Log what `decision` changed in the queue `before` was (see the module docstring)."""
    queue = queue_name(repository, before.queue.branch)
    entries: dict[PullRequestId, QueueEntry] = {
        entry.id: entry for entry in (*before.entries, *decision.state.entries, *decision.departed)
    }
    if isinstance(event, TargetBranchMoved):
        log.info("target branch moved", queue=queue, sha=event.sha)
    # A PR entering the line comes first in the story, then the runs that test it.
    entering = [change for change in decision.changes if change.reason in _ENTERING]
    for change in entering:
        _log_change(queue, change, entries, event)
    old_runs = {run.id: run for run in before.runs}
    for run in (*decision.state.runs, *decision.closed_runs):
        _log_run(queue, old_runs.get(run.id), run, entries)
    for change in decision.changes:
        if change.reason not in _ENTERING:
            _log_change(queue, change, entries, event)


def log_entered(
    repository: Repository | RepoRef, branch: str, entry: QueueEntry, change: StateChange
) -> None:
    """Log a PR entering the queue, which is written without a decision (`QueueEngine.enter`)."""
    _log_change(queue_name(repository, branch), change, {entry.id: entry}, Tick())


def _log_run(
    queue: str, old: TestRun | None, run: TestRun, entries: dict[PullRequestId, QueueEntry]
) -> None:
    if old is None:
        log.info(
            "run started",
            queue=queue,
            run=run.id,
            kind=run.kind.value,
            status=run.status.value,
            # The predicted branch: the target at base_sha, the PRs ahead, then the tested ones.
            base_sha=run.base_sha,
            ahead=_numbers(run.dependent_prs, entries),
            prs=_numbers(run.tested_prs, entries),
            branch=run.branch,
        )
        return
    if old.sha is None and run.sha is not None:
        log.info("run built", queue=queue, run=run.id, sha=run.sha, branch=run.branch)
    if old.status is run.status:
        return
    fields = {
        "queue": queue,
        "run": run.id,
        "sha": run.sha,
        "prs": _numbers(run.tested_prs, entries),
    }
    match run.status:
        case TestRunStatus.SUCCEEDED:
            log.info("run passed", **fields)
        case TestRunStatus.FAILED:
            reason = run.failure_reason.value if run.failure_reason else None
            log.warning("run failed", reason=reason, **fields)
        case TestRunStatus.CANCELLED:
            log.info("run cancelled", **fields)
        case TestRunStatus.IN_PROGRESS | TestRunStatus.QUEUED:
            log.info("run status changed", status=run.status.value, **fields)


def _log_change(
    queue: str, change: StateChange, entries: dict[PullRequestId, QueueEntry], event: Event
) -> None:
    entry = entries.get(change.pull_request_id)
    fields: dict[str, object] = {
        "queue": queue,
        "pr": entry.number if entry is not None else None,
        "reason": change.reason.value,
    }
    if change.test_run_id is not None:
        fields["run"] = change.test_run_id
    if change.reason in _ENTERING and entry is not None and entry.is_read:
        fields["sha"] = entry.head_sha  # a PR submitted unread has its head once admitted
    if change.reason is StateReason.SUBMITTED:
        log.info("pr submitted", state=change.to_state.value, **fields)
        return
    name = _EVENT_BY_STATE.get(change.to_state)
    if change.to_state is PrState.MERGED and isinstance(event, Landed):
        fields["sha"] = event.new_tip
    if name is None:
        old = change.from_state.value if change.from_state else None
        log.info("pr state changed", old=old, new=change.to_state.value, **fields)
    elif change.to_state is PrState.FAILED:
        log.warning(name, **fields)
    else:
        log.info(name, **fields)


def _numbers(
    ids: tuple[PullRequestId, ...], entries: dict[PullRequestId, QueueEntry]
) -> list[int | None]:
    return [entries[i].number if i in entries else None for i in ids]


__all__ = ["log_decision", "log_entered", "queue_name"]
