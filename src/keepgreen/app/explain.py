"""What a PR is waiting on, or why it left, in plain words: one explanation, rendered from
the queue's state, that `getSubmittedPullRequest`, `keepgreen status` and the GitHub App's
check run and comment all show.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Literal, assert_never

from keepgreen.core.enums import (
    CommitState,
    Mergeability,
    PrState,
    StateReason,
    TestRunKind,
    TestRunStatus,
)
from keepgreen.core.ids import TestRunId
from keepgreen.core.model import CommitStatus, QueueEntry, TestRun

# Where a PR is: waiting for its turn, being tested or landed, or done (with a verdict).
Progress = Literal["queued", "in_progress", "completed"]
Verdict = Literal["success", "failure", "cancelled"]


@dataclass(frozen=True, slots=True)
class Check:
    """One required check of a run as it stands: `state` None when CI never reported it."""

    context: str
    state: CommitState | None
    description: str | None = None
    target_url: str | None = None


@dataclass(frozen=True, slots=True)
class Bisection:
    """The failed batch a PR was part of, and what bisecting it found."""

    batch_run: TestRunId  # the failed batch run the bisection started from
    isolating_run: TestRunId | None  # the run that failed this PR alone, when it is a culprit
    culprits: tuple[int, ...]  # the PRs the bisection failed, in the batch's order


@dataclass(frozen=True, slots=True)
class Evidence:
    """What the explanation rests on, as data for scripts: the run that tests the PR (or that
    decided it), that run's required checks, the run whose pass verified it, and the bisection
    of a failed batch it was part of.
    """

    test_run: TestRun | None = None
    checks: tuple[Check, ...] = ()
    failed_statuses: tuple[Check, ...] = ()  # the decided run's required checks that did not pass
    passed_run: TestRun | None = None  # its own run, or a successor's (optimistic merge)
    bisection: Bisection | None = None


@dataclass(frozen=True, slots=True)
class Explanation:
    """A PR's place in one line (`title`) and in a few (`summary`, Markdown), with the link to
    its CI run when there is one; `verdict` once it left the queue; the stable code of the last
    change (`reason_code`, a `StateReason` value) and the evidence as data.
    """

    progress: Progress
    title: str
    summary: str
    verdict: Verdict | None = None
    details_url: str | None = None
    reason_code: str = ""
    evidence: Evidence = Evidence()


# Why a PR left or waits, in the words its author reads, by reason code (a `StateReason`). A
# code without a sentence here reads as its words ("check_never_started": "check never
# started"); add a line to say it better.
REASONS: Mapping[str, str] = {
    StateReason.CANCELED_BY_USER: "it was cancelled",
    StateReason.PUSHED_TO: "the pull request was pushed to while it was queued; queue it again",
    StateReason.PR_CLOSED: "the pull request was closed",
    StateReason.PR_NOT_FOUND: "the code host has no open pull request with this number",
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
    StateReason.RESTART_REQUESTED: "its tests were restarted",
    StateReason.BISECTING: "its batch failed; it is tested alone or in halves to find the culprit",
    StateReason.CLEARED_BY_ISOLATION: "its batch failed but its own run passed; it rejoined the "
    "line behind the PRs being tested",
    StateReason.CLEARED_BY_SUCCESSOR: "a run with PRs behind it passed, which vouches for it",
    StateReason.CHECK_NEVER_STARTED: "a required check never started",
    StateReason.CHECK_SKIPPED: "a required check was skipped, which does not count as passed",
    StateReason.RETRYING: "its run failed and is tested again alone, in case the failure was "
    "spurious",
    StateReason.FLAKY_FAILURES_FORGIVEN: "only known flaky tests failed, so the failure was "
    "forgiven",
    StateReason.NOT_READY_TIMEOUT: "it was not ready for longer than the queue's "
    "notReadyTimeoutHours; queue it again once it is ready",
}


def _not_ready_because(entry: QueueEntry) -> str | None:
    """What keeps a PR that was read out of the line, from its readiness; None when it is
    ready (a paused or draining queue holds it, which its reason says).
    """
    readiness = entry.readiness
    if readiness.mergeability is Mergeability.NOT_MERGEABLE:
        return f"it does not merge cleanly onto `{entry.base_branch}`; merge or rebase it"
    if readiness.mergeability is not Mergeability.MERGEABLE:
        return "the code host has not said yet whether it merges cleanly"
    if readiness.requires_impacted_targets and not readiness.has_impacted_targets:
        return f"the impacted targets of its head {entry.head_sha[:12]} are not uploaded yet"
    return None


def reason_text(reason: str) -> str:
    """The sentence of a reason code; a code without one (a new one) reads as its words."""
    return REASONS.get(reason) or reason.replace("_", " ")


@dataclass(frozen=True, slots=True)
class Facts:
    """What the view of one PR is rendered from."""

    entry: QueueEntry
    position: int | None  # 1-based place among the PRs in the queue; None when not in it
    queued: int  # how many PRs are in the queue
    run: TestRun | None  # the open run that tests it, if any (once it left: the deciding run)
    statuses: Mapping[str, CommitStatus]  # the run's statuses by context
    required: tuple[str, ...]  # the contexts the run waits for
    merged_sha: str | None
    now: datetime
    passed_run: TestRun | None = None  # the run whose pass verified it (its entry's verifier)
    bisection: Bisection | None = None  # the failed batch it was part of, and its culprits
    detail: str | None = None  # what its last change's reason alone does not say


def render(facts: Facts) -> Explanation:
    """The check run of one PR (its comment says the same, as Markdown)."""
    view = _render(facts)
    return replace(view, reason_code=facts.entry.state_reason.value, evidence=evidence_of(facts))


def _render(facts: Facts) -> Explanation:
    entry = facts.entry
    reason = reason_text(entry.state_reason)
    # Titles stay short; summaries add what the reason alone does not say.
    told = f"{reason} ({facts.detail})" if facts.detail else reason
    details = _details_url(facts)
    match entry.state:
        case PrState.NOT_READY if not entry.is_read:
            return Explanation(
                "queued",
                "Waiting to enter the queue",
                "Submitted: keepgreen is reading the pull request and whether it merges cleanly.",
            )
        case PrState.NOT_READY:
            why = _not_ready_because(entry)
            summary = f"Not yet: {why}." if why else f"Not yet: {told}."
            return Explanation("queued", "Waiting to enter the queue", summary)
        case PrState.PENDING:
            title = f"Queued: position {facts.position} of {facts.queued}"
            if facts.position is None:
                title = "Queued"
            lines = [f"Waiting for a testing slot on `{entry.base_branch}`."]
            if entry.state_reason not in (StateReason.SUBMITTED, StateReason.READY):
                lines[0] += f" Back in line because {told}."
            lines.append(f"In line since {_clock(entry.state_changed_at, facts.now)}.")
            lines.extend(_bisection_lines(facts))
            return Explanation("queued", title, "\n".join(lines))
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
                _passed_summary(facts),
                details_url=details,
            )
        case PrState.PENDING_FAILURE:
            summary = (
                "The PRs ahead of this one are still being tested; it fails only if they pass."
            )
            return Explanation(
                "in_progress",
                "A test failed; waiting to learn which PR broke it",
                "\n".join([summary, *_run_lines(facts)]),
                details_url=details,
            )
        case PrState.MERGED:
            sha = facts.merged_sha
            title = f"Merged as {sha[:12]}" if sha else "Merged"
            summary = f"Merged into `{entry.base_branch}`" + (f" as commit {sha}." if sha else ".")
            lines = [summary, *_verified_lines(facts), *_bisection_lines(facts)]
            return Explanation("completed", title, "\n".join(lines), verdict="success")
        case PrState.FAILED:
            return Explanation(
                "completed",
                f"Failed: {reason}",
                _failed_summary(facts, told),
                verdict="failure",
                details_url=details,
            )
        case PrState.CANCELLED:
            return Explanation(
                "completed",
                f"Cancelled: {reason}",
                f"Left the queue because {told}.",
                verdict="cancelled",
            )
        case _:
            assert_never(entry.state)


def evidence_of(facts: Facts) -> Evidence:
    """The evidence as data: the run, its required checks, what failed, what passed."""
    run = facts.run
    checks = tuple(_check(context, facts.statuses.get(context)) for context in facts.required)
    return Evidence(
        test_run=run,
        checks=checks,
        failed_statuses=_failed_checks(run, checks),
        passed_run=facts.passed_run,
        bisection=facts.bisection,
    )


def _check(context: str, status: CommitStatus | None) -> Check:
    if status is None:
        return Check(context, None)
    return Check(context, status.state, status.description, status.target_url)


def _failed_checks(run: TestRun | None, checks: tuple[Check, ...]) -> tuple[Check, ...]:
    """A failed run's required checks that failed; when none did (a timeout, a check that never
    started), those that never passed. None for a run that was never built (a conflict).
    """
    if run is None or run.status is not TestRunStatus.FAILED or run.sha is None:
        return ()
    failed = tuple(c for c in checks if c.state in (CommitState.FAILURE, CommitState.ERROR))
    return failed or tuple(c for c in checks if c.state is not CommitState.SUCCESS)


def _testing_title(facts: Facts) -> str:
    run = facts.run
    if run is None:
        return "Testing"
    return f"Testing in run {run.id}" + (
        " (bisection)" if run.kind is TestRunKind.BISECTION else ""
    )


def _place(facts: Facts) -> str:
    return f"Position {facts.position} of {facts.queued}; " if facts.position else ""


def _testing_summary(facts: Facts) -> str:
    """ "Position 3 of 7; testing in run X since 12:03 UTC, waiting on `ci/build`.", then each
    required check as it stands.
    """
    run = facts.run
    if run is None:
        return _sentence(f"{_place(facts)}testing on top of the predicted branch.")
    since = _clock(run.started_at or run.created_at, facts.now)
    waiting = [
        f"`{context}`"
        for context in facts.required
        if (status := facts.statuses.get(context)) is None or status.state is CommitState.PENDING
    ]
    head = f"{_place(facts)}testing in run {run.id} since {since}"
    head += f", waiting on {', '.join(waiting)}." if waiting else "."
    return "\n".join(
        [
            _sentence(head),
            *_because(facts, usual=StateReason.TESTS_STARTED),
            f"Testing on `{run.branch}`, on top of {run.base_sha[:12]}.",
            *_check_lines(facts, run),
            *_bisection_lines(facts),
        ]
    )


def _because(facts: Facts, *, usual: StateReason) -> list[str]:
    """Why it is where it is, unless for the usual reason (a retry, a forgiven failure)."""
    reason = facts.entry.state_reason
    if reason is usual:
        return []
    detail = f" ({facts.detail})" if facts.detail else ""
    return [f"Because {reason_text(reason)}{detail}."]


def _check_lines(facts: Facts, run: TestRun) -> list[str]:
    lines = []
    for context in facts.required:
        status = facts.statuses.get(context)
        if status is None:
            since = _clock(run.started_at or run.created_at, facts.now)
            lines.append(f"- waiting on `{context}`: not reported since {since}")
        elif status.state is CommitState.PENDING:
            lines.append(
                f"- waiting on `{context}`: running since {_clock(status.updated_at, facts.now)}"
            )
        else:
            lines.append(_check_line(context, status))
    return lines


def _passed_summary(facts: Facts) -> str:
    """A passed PR waits for the PRs ahead to land; says which run vouches for it."""
    lines = [_sentence(f"{_place(facts)}waiting for the PRs ahead of it to merge.")]
    lines += _because(facts, usual=StateReason.TESTS_PASSED)
    lines += _verified_lines(facts)
    run = facts.run
    if run is not None and facts.required:
        lines += _check_lines(facts, run)
    return "\n".join([*lines, *_bisection_lines(facts)])


def _verified_lines(facts: Facts) -> list[str]:
    """The run that passed: its own, or a successor's that held it (optimistic merge)."""
    run = facts.passed_run
    if run is None:
        if facts.entry.state_reason is StateReason.MERGED_DIRECTLY:
            return ["Merged directly: up to date, with the queue empty and its own checks green."]
        return []
    at = f" at {_clock(run.finished_at, facts.now)}" if run.finished_at else ""
    commit = f" (commit {run.sha[:12]})" if run.sha else ""
    if facts.entry.id in run.tested_prs:
        return [f"Verified by run {run.id}{commit}, which passed{at}."]
    behind = [link.number for link in run.chain[-len(run.tested_prs) :]] if run.chain else []
    with_them = f" with {_numbers(behind)} on top of it" if behind else " with PRs behind it"
    return [f"Cleared by run {run.id}{commit}, which tested it{with_them} and passed{at}."]


def _run_lines(facts: Facts) -> list[str]:
    """The failed run and each of its required checks."""
    run = facts.run
    if run is None or not facts.required:
        return []
    return [
        f"Run {run.id} on `{run.branch}`:",
        *(_check_line(context, facts.statuses.get(context)) for context in facts.required),
    ]


def _failed_summary(facts: Facts, reason: str) -> str:
    """Why the PR failed, and the evidence: the deciding run's required checks."""
    summary = f"Removed from the queue because {reason}."
    run = facts.run
    if run is not None and run.kind is TestRunKind.BISECTION and facts.bisection is None:
        summary += " Bisection of the batch found this PR to be the one that fails."
    return "\n".join([summary, *_bisection_lines(facts), *_run_lines(facts)])


def _bisection_lines(facts: Facts) -> list[str]:
    bisection = facts.bisection
    if bisection is None:
        return []
    line = f"Its batch (run {bisection.batch_run}) failed"
    if bisection.isolating_run is not None:
        line += f"; run {bisection.isolating_run} tested it alone and failed"
    others = [n for n in bisection.culprits if n != facts.entry.number]
    if others:
        line += f"; bisection found {_numbers(others)} to break it"
    elif not bisection.culprits:
        line += "; bisection has not found the culprit yet"
    return [line + "."]


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _numbers(numbers: Sequence[int]) -> str:
    return ", ".join(f"#{n}" for n in numbers)


def _check_line(context: str, status: CommitStatus | None) -> str:
    if status is None:
        return f"- `{context}`: never reported"
    said = f" ({status.description})" if status.description else ""
    link = f" {status.target_url}" if _is_link(status.target_url) else ""
    return f"- `{context}`: {status.state.value}{said}{link}"


def _is_link(url: str | None) -> bool:
    return url is not None and url.startswith(("http://", "https://"))


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
        if status is not None and _is_link(status.target_url):
            return status.target_url
    return None


def _clock(moment: datetime, now: datetime) -> str:
    """A moment in UTC: its time alone when it is today's, else with its date."""
    moment, now = _utc(moment), _utc(now)
    if moment.date() == now.date():
        return moment.strftime("%H:%M UTC")
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def _utc(moment: datetime) -> datetime:
    # Naive moments are UTC already (SQLite hands them back without a zone).
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def milestone(facts: Facts) -> Facts:
    """The facts without what changes between milestones (place in line, checks' progress):
    what the comment is rendered from.
    """
    return replace(facts, position=None, statuses={}, required=())


__all__ = [
    "REASONS",
    "Bisection",
    "Check",
    "Evidence",
    "Explanation",
    "Facts",
    "evidence_of",
    "milestone",
    "reason_text",
    "render",
]
