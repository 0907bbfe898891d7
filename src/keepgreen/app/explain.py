"""What a PR is waiting on, or why it left, in plain words: one explanation, rendered from
the queue's state, that `getSubmittedPullRequest`, `keepgreen status` and the GitHub App's
check run and comment all show.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Literal, assert_never

from keepgreen.app.engine import live_entries
from keepgreen.app.ports import UnitOfWork
from keepgreen.core.enums import CommitState, PrState, StateReason, TestRunKind
from keepgreen.core.ids import PullRequestId, TestRunId
from keepgreen.core.model import CommitStatus, Queue, QueueEntry, Repository, TestRun
from keepgreen.core.ordering import queue_order

# Where a PR is: waiting for its turn, being tested or landed, or done (with a verdict).
Progress = Literal["queued", "in_progress", "completed"]
Verdict = Literal["success", "failure", "cancelled"]


@dataclass(frozen=True, slots=True)
class Explanation:
    """A PR's place in one line (`title`) and in a few (`summary`, Markdown), with the link to
    its CI run when there is one; `verdict` once it left the queue.
    """

    progress: Progress
    title: str
    summary: str
    verdict: Verdict | None = None
    details_url: str | None = None


# Why a PR left or waits, in the words its author reads.
REASONS: Mapping[StateReason, str] = {
    StateReason.CANCELED_BY_USER: "it was cancelled",
    StateReason.PUSHED_TO: "the pull request was pushed to while it was queued; queue it again",
    StateReason.PR_CLOSED: "the pull request was closed",
    StateReason.TESTS_FAILED: "its tests failed",
    StateReason.TEST_RUN_TIMEOUT: "its tests did not finish in time",
    StateReason.MERGE_CONFLICT: "it does not merge cleanly onto the branch and the PRs ahead",
    StateReason.NO_REQUIRED_STATUSES: "the queue requires no status check, so nothing tests it",
    StateReason.MERGE_REFUSED: "its tested change no longer applies to the branch",
    StateReason.PUSH_REJECTED: "GitHub refused the merge (a branch rule, or the App's rights)",
    StateReason.TEST_RUN_FAILED_BY_OPTIMIZATION: "a test of the same change failed already",
    StateReason.PREDECESSOR_CHANGED: "a PR ahead of it left the queue; it is tested again",
    StateReason.TARGET_BRANCH_MOVED: "the branch moved; it is tested again on the new tip",
    StateReason.PREEMPTED: "an urgent PR went ahead of it; it is tested again after it",
    StateReason.CI_LOST: "the CI run was lost; it is tested again",
    StateReason.NOT_READY: "it is not ready: it must be open, mergeable and based on the branch",
}


@dataclass(frozen=True, slots=True)
class Facts:
    """What the view of one PR is rendered from."""

    entry: QueueEntry
    position: int | None  # 1-based place among the PRs in the queue; None when not in it
    queued: int  # how many PRs are in the queue
    run: TestRun | None  # the open run that tests it, if any
    statuses: Mapping[str, CommitStatus]  # the run's statuses by context
    required: tuple[str, ...]  # the contexts the run waits for
    merged_sha: str | None
    now: datetime


def render(facts: Facts) -> Explanation:
    """The check run of one PR (its comment says the same, as Markdown)."""
    entry = facts.entry
    reason = REASONS.get(entry.state_reason, entry.state_reason.value.replace("_", " "))
    details = _details_url(facts)
    match entry.state:
        case PrState.NOT_READY:
            return Explanation("queued", "Waiting to enter the queue", f"Not yet: {reason}.")
        case PrState.PENDING:
            title = f"Queued: position {facts.position} of {facts.queued}"
            if facts.position is None:
                title = "Queued"
            summary = f"Waiting for a testing slot on `{entry.base_branch}`."
            if entry.state_reason not in (StateReason.SUBMITTED, StateReason.READY):
                summary += f" Back in line because {reason}."
            return Explanation("queued", title, summary)
        case PrState.TESTING:
            return Explanation(
                "in_progress",
                _testing_title(facts),
                _testing_summary(facts),
                details_url=details,
            )
        case PrState.TESTS_PASSED:
            return Explanation(
                "in_progress",
                "Tests passed; merging after the PRs ahead",
                _testing_summary(facts),
                details_url=details,
            )
        case PrState.PENDING_FAILURE:
            return Explanation(
                "in_progress",
                "A test failed; waiting to learn which PR broke it",
                "The PRs ahead of this one are still being tested; it fails only if they pass.",
                details_url=details,
            )
        case PrState.MERGED:
            sha = facts.merged_sha
            title = f"Merged as {sha[:12]}" if sha else "Merged"
            summary = f"Merged into `{entry.base_branch}`" + (f" as commit {sha}." if sha else ".")
            return Explanation("completed", title, summary, verdict="success")
        case PrState.FAILED:
            return Explanation(
                "completed",
                f"Failed: {reason}",
                _failed_summary(facts, reason),
                verdict="failure",
                details_url=details,
            )
        case PrState.CANCELLED:
            return Explanation(
                "completed",
                f"Cancelled: {reason}",
                f"Left the queue because {reason}.",
                verdict="cancelled",
            )
        case _:
            assert_never(entry.state)


def _testing_title(facts: Facts) -> str:
    run = facts.run
    if run is None:
        return "Testing"
    return f"Testing in run {run.id}" + (
        " (bisection)" if run.kind is TestRunKind.BISECTION else ""
    )


def _testing_summary(facts: Facts) -> str:
    run = facts.run
    if run is None:
        return "Testing on top of the predicted branch."
    lines = [f"Testing on `{run.branch}`, on top of {run.base_sha[:12]}."]
    for context in facts.required:
        status = facts.statuses.get(context)
        since = run.started_at or run.created_at
        if status is None:
            lines.append(f"- waiting on `{context}`: not reported since {_clock(since)}")
        elif status.state is CommitState.PENDING:
            lines.append(f"- waiting on `{context}`: running since {_clock(status.updated_at)}")
        else:
            lines.append(f"- `{context}`: {status.state.value}")
    return "\n".join(lines)


def _failed_summary(facts: Facts, reason: str) -> str:
    """Why the PR failed, and the evidence: the deciding run's required checks."""
    summary = f"Removed from the queue because {reason}."
    run = facts.run
    if run is not None and run.kind is TestRunKind.BISECTION:
        summary += " Bisection of the batch found this PR to be the one that fails."
    if run is not None and facts.required:
        summary += f"\nRun {run.id} on `{run.branch}`:\n" + "\n".join(
            _check_line(context, facts.statuses.get(context)) for context in facts.required
        )
    return summary


def _check_line(context: str, status: CommitStatus | None) -> str:
    if status is None:
        return f"- `{context}`: never reported"
    said = f" ({status.description})" if status.description else ""
    return f"- `{context}`: {status.state.value}{said}"


def _details_url(facts: Facts) -> str | None:
    """The link of the first required check that failed, else of the first that has one."""
    failed = [
        context
        for context in facts.required
        if (status := facts.statuses.get(context)) is not None
        and status.state in (CommitState.FAILURE, CommitState.ERROR)
    ]
    for context in (*failed, *facts.required):
        status = facts.statuses.get(context)
        if status is not None and status.target_url and status.target_url.startswith("http"):
            return status.target_url
    return None


def _clock(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def milestone(facts: Facts) -> Facts:
    """The facts without what changes between milestones (place in line, checks' progress):
    what the comment is rendered from.
    """
    return replace(facts, position=None, statuses={}, required=())


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
    for change in uow.history.list_since([queue.id], now - left_within):
        if change.test_run_id is not None:
            last_run[change.pull_request_id] = change.test_run_id
        else:
            last_run.setdefault(change.pull_request_id, TestRunId(""))
    known = {entry.id for entry in live}
    left = [
        entry
        for entry in (uow.entries.get(entry_id) for entry_id in last_run.keys() - known)
        if entry.state.is_terminal and entry.state_changed_at >= now - left_within
    ]
    return [
        _facts_of(
            uow,
            repository,
            entry,
            runs=runs,
            order=order,
            decided_by=last_run.get(entry.id),
            now=now,
        )
        for entry in (*live, *left)
    ]


def entry_facts(
    uow: UnitOfWork, queue: Queue, repository: Repository, entry: QueueEntry, now: datetime
) -> Facts:
    """The facts of one PR of the queue, in it or gone from it (a few reads, not the queue's)."""
    runs = list(uow.test_runs.list_open(queue.id))
    order: list[PullRequestId] = []
    decided_by = None
    if entry.state.is_terminal:
        changes = uow.history.list_for_entry(entry.id)
        decided_by = next((c.test_run_id for c in reversed(changes) if c.test_run_id), None)
    elif entry.state is PrState.PENDING:
        # Only a waiting PR shows its place in line, which needs the whole queue's order.
        holding = frozenset(entry_id for run in runs for entry_id in run.members)
        order = [each.id for each in queue_order(uow.entries.placed(queue.id), holding=holding)]
    return _facts_of(uow, repository, entry, runs=runs, order=order, decided_by=decided_by, now=now)


def _facts_of(
    uow: UnitOfWork,
    repository: Repository,
    entry: QueueEntry,
    *,
    runs: Sequence[TestRun],
    order: Sequence[PullRequestId],
    decided_by: TestRunId | None,
    now: datetime,
) -> Facts:
    """`entry`'s facts: its open run (or, once it left, the run that decided it), that run's
    statuses, and its place in `order`.
    """
    run = _run_of(entry, runs)
    if run is None and entry.state.is_terminal and decided_by:
        run = uow.test_runs.get(entry.queue_id, decided_by)
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
    )


def _run_of(entry: QueueEntry, runs: Sequence[TestRun]) -> TestRun | None:
    """The newest open run that tests `entry` (or, failing that, holds it as a dependent)."""
    testing = [run for run in runs if entry.id in run.tested_prs]
    holding = [run for run in runs if entry.id in run.members]
    chosen = testing or holding
    return max(chosen, key=lambda run: run.created_at) if chosen else None


__all__ = ["REASONS", "Explanation", "Facts", "entry_facts", "milestone", "queue_facts", "render"]
