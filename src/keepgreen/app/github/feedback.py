"""What a PR on GitHub shows of its place in the queue: a check run named `keepgreen` on its
head, and one comment kept up to date (not a comment per event).

After each pass over a queue of the App, the worker calls `publish`: for each PR in the queue,
and each that left it in the last minutes, the view is rendered from the queue's state and
sent only when it differs from what was last shown (a digest is kept per PR), so a quiet
queue costs no API calls. The request budget decides the rest: the comment tells milestones
only (queued, testing in a run, passed, merged, failed, cancelled), and the check run's minor
changes (its place in line, a required check's progress) are sent at most every
`MINOR_CHANGE_SECONDS`; a queue draining N waiting PRs would otherwise cost N updates per
merge. `statusCheckEnabled` and `commentsEnabled` of the queue switch each
part. The check run follows the head: a PR pushed to gets a new one on the new head.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import assert_never

import structlog

from keepgreen.app.engine import live_entries
from keepgreen.app.github.api import CheckRunView, GithubApi
from keepgreen.app.github.host import where
from keepgreen.app.ports import Clock, UnitOfWork, UnitOfWorkFactory
from keepgreen.core.enums import CommitState, PrState, StateReason, TestRunKind
from keepgreen.core.ids import PullRequestId, QueueId, TestRunId
from keepgreen.core.model import (
    CommitStatus,
    GithubFeedback,
    Queue,
    QueueEntry,
    Repository,
    TestRun,
)
from keepgreen.core.ordering import queue_order

log = structlog.get_logger(__name__)

# PRs that left the queue this recently still get their final view (a pass missed is retried).
_LEFT_WITHIN = timedelta(minutes=30)
# A check run whose milestone is unchanged is sent again at most this often.
MINOR_CHANGE_SECONDS = 120.0

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


def render(facts: Facts) -> CheckRunView:
    """The check run of one PR (its comment says the same, as Markdown)."""
    entry = facts.entry
    reason = REASONS.get(entry.state_reason, entry.state_reason.value.replace("_", " "))
    details = _details_url(facts)
    match entry.state:
        case PrState.NOT_READY:
            return CheckRunView("queued", "Waiting to enter the queue", f"Not yet: {reason}.")
        case PrState.PENDING:
            title = f"Queued: position {facts.position} of {facts.queued}"
            if facts.position is None:
                title = "Queued"
            summary = f"Waiting for a testing slot on `{entry.base_branch}`."
            if entry.state_reason not in (StateReason.SUBMITTED, StateReason.READY):
                summary += f" Back in line because {reason}."
            return CheckRunView("queued", title, summary)
        case PrState.TESTING:
            return CheckRunView(
                "in_progress",
                _testing_title(facts),
                _testing_summary(facts),
                details_url=details,
            )
        case PrState.TESTS_PASSED:
            return CheckRunView(
                "in_progress",
                "Tests passed; merging after the PRs ahead",
                _testing_summary(facts),
                details_url=details,
            )
        case PrState.PENDING_FAILURE:
            return CheckRunView(
                "in_progress",
                "A test failed; waiting to learn which PR broke it",
                "The PRs ahead of this one are still being tested; it fails only if they pass.",
                details_url=details,
            )
        case PrState.MERGED:
            sha = facts.merged_sha
            title = f"Merged as {sha[:12]}" if sha else "Merged"
            summary = f"Merged into `{entry.base_branch}`" + (f" as commit {sha}." if sha else ".")
            return CheckRunView("completed", title, summary, conclusion="success")
        case PrState.FAILED:
            summary = f"Removed from the queue because {reason}."
            if facts.run is not None and facts.run.kind is TestRunKind.BISECTION:
                summary += " Bisection of the batch found this PR to be the one that fails."
            return CheckRunView(
                "completed",
                f"Failed: {reason}",
                summary,
                conclusion="failure",
                details_url=details,
            )
        case PrState.CANCELLED:
            return CheckRunView(
                "completed",
                f"Cancelled: {reason}",
                f"Left the queue because {reason}.",
                conclusion="cancelled",
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


def _details_url(facts: Facts) -> str | None:
    for context in facts.required:
        status = facts.statuses.get(context)
        if status is not None and status.target_url and status.target_url.startswith("http"):
            return status.target_url
    return None


def _clock(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def comment_body(view: CheckRunView, number: int) -> str:
    """The one comment keepgreen keeps on a PR."""
    body = f"**keepgreen** · #{number}: **{view.title}**\n\n{view.summary}"
    if view.details_url:
        body += f"\n\n[CI run]({view.details_url})"
    return body


def milestone(facts: Facts) -> Facts:
    """The facts without what changes between milestones (place in line, checks' progress):
    what the comment is rendered from.
    """
    return replace(facts, position=None, statuses={}, required=())


def digest(view: CheckRunView, head_sha: str) -> str:
    text = repr((view, head_sha)).encode()
    return hashlib.sha256(text).hexdigest()[:32]


class GithubFeedbackPublisher:
    """Keeps each PR's check run and comment in step with its queue (see the module doc)."""

    def __init__(self, uow: UnitOfWorkFactory, *, api: GithubApi, clock: Clock) -> None:
        self._uow = uow
        self._api = api
        self._clock = clock

    def publish(self, queue_id: QueueId) -> None:
        """Send the views that changed since they were last shown."""
        now = self._clock()
        with self._uow() as uow:
            queue = uow.queues.get(queue_id)
            if queue is None:
                return
            repository = uow.repositories.get(queue.repository_id)
            config = queue.config
            if repository.github_installation_id is None or not (
                config.status_check_enabled or config.comments_enabled
            ):
                return
            facts = self._facts(uow, queue, repository, now)
            shown = {
                fact.entry.number: uow.github_feedback.get(repository.id, fact.entry.number)
                for fact in facts
            }
        for fact in facts:
            known = shown[fact.entry.number] or GithubFeedback(repository.id, fact.entry.number)
            view, brief = render(fact), render(milestone(fact))
            head = fact.entry.head_sha
            if known.shown == digest(view, head):
                continue
            minor = known.shown_comment == digest(brief, head)
            since = None if known.shown_at is None else (now - known.shown_at).total_seconds()
            if minor and since is not None and since < MINOR_CHANGE_SECONDS:
                continue  # only the place in line or a check's progress moved: later
            self._show(repository, queue, fact.entry, (view, brief), known, now=now)

    def _facts(
        self, uow: UnitOfWork, queue: Queue, repository: Repository, now: datetime
    ) -> list[Facts]:
        live = list(live_entries(uow, queue.id))
        runs = list(uow.test_runs.list_open(queue.id))
        holding = frozenset(entry_id for run in runs for entry_id in run.members)
        order = [entry.id for entry in queue_order(live, holding=holding)]
        # The last run of each PR that changed lately: a PR that left names the run that
        # decided it (its CI link, a bisection's verdict).
        last_run: dict[PullRequestId, TestRunId] = {}
        for change in uow.history.list_since([queue.id], now - _LEFT_WITHIN):
            if change.test_run_id is not None:
                last_run[change.pull_request_id] = change.test_run_id
            else:
                last_run.setdefault(change.pull_request_id, TestRunId(""))
        known = {entry.id for entry in live}
        left = [
            entry
            for entry in (uow.entries.get(entry_id) for entry_id in last_run.keys() - known)
            if entry.state.is_terminal and entry.state_changed_at >= now - _LEFT_WITHIN
        ]
        facts = []
        for entry in (*live, *left):
            run = _run_of(entry, runs)
            if run is None and entry.state.is_terminal and last_run.get(entry.id):
                run = uow.test_runs.get(queue.id, last_run[entry.id])
            statuses: dict[str, CommitStatus] = {}
            if run is not None and run.sha is not None:
                statuses = {
                    status.context: status
                    for status in uow.statuses.list_for_sha(repository.id, run.sha)
                }
            stored = uow.github_feedback.get(repository.id, entry.number)
            facts.append(
                Facts(
                    entry=entry,
                    position=order.index(entry.id) + 1 if entry.id in order else None,
                    queued=len(order),
                    run=run,
                    statuses=statuses,
                    required=run.required_statuses if run is not None else (),
                    merged_sha=stored.merged_sha if stored else None,
                    now=now,
                )
            )
        return facts

    def _show(
        self,
        repository: Repository,
        queue: Queue,
        entry: QueueEntry,
        views: tuple[CheckRunView, CheckRunView],
        known: GithubFeedback,
        *,
        now: datetime,
    ) -> None:
        view, brief = views
        place = where(repository)
        check_run_id, check_run_sha, comment_id = (
            known.check_run_id,
            known.check_run_sha,
            known.comment_id,
        )
        if queue.config.status_check_enabled:
            if check_run_id is not None and check_run_sha == entry.head_sha:
                self._api.update_check_run(place, check_run_id, view)
            else:
                check_run_id = self._api.create_check_run(place, head_sha=entry.head_sha, view=view)
                check_run_sha = entry.head_sha
        brief_digest = digest(brief, entry.head_sha)
        if queue.config.comments_enabled and brief_digest != known.shown_comment:
            body = comment_body(brief, entry.number)
            if comment_id is None or not self._api.update_comment(place, comment_id, body):
                comment_id = self._api.create_comment(place, entry.number, body)
        with self._uow() as uow:
            uow.github_feedback.save(
                replace(
                    uow.github_feedback.get(repository.id, entry.number) or known,
                    check_run_id=check_run_id,
                    check_run_sha=check_run_sha,
                    comment_id=comment_id,
                    shown=digest(view, entry.head_sha),
                    shown_comment=brief_digest,
                    shown_at=now,
                )
            )
            uow.commit()

    # -- MergeFeedback (the GitHub host's landing) -------------------------------------------

    def merging(self, repo: Repository, number: int, head_sha: str) -> None:
        """Pass keepgreen's check run on the head before the merge (a rule may require it)."""
        with self._uow() as uow:
            known = uow.github_feedback.get(repo.id, number)
        if known is None or known.check_run_id is None or known.check_run_sha != head_sha:
            return  # check runs are off for this queue, or none was made on this head
        view = CheckRunView(
            "completed",
            "Tests passed; merging",
            "The tested change is being merged.",
            conclusion="success",
        )
        self._api.update_check_run(where(repo), known.check_run_id, view)

    def merged(self, repo: Repository, number: int, sha: str) -> None:
        with self._uow() as uow:
            known = uow.github_feedback.get(repo.id, number) or GithubFeedback(repo.id, number)
            uow.github_feedback.save(replace(known, merged_sha=sha))
            uow.commit()


def _run_of(entry: QueueEntry, runs: Sequence[TestRun]) -> TestRun | None:
    """The newest open run that tests `entry` (or, failing that, holds it as a dependent)."""
    testing = [run for run in runs if entry.id in run.tested_prs]
    holding = [run for run in runs if entry.id in run.members]
    chosen = testing or holding
    return max(chosen, key=lambda run: run.created_at) if chosen else None


__all__ = ["Facts", "GithubFeedbackPublisher", "comment_body", "render"]
