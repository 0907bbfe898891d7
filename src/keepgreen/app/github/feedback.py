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

With the queue's `stateLabelsEnabled`, the PR also carries one label of its state, seen in
GitHub's list of pull requests: `keepgreen:queued` (waiting to enter, or to be tested),
`keepgreen:testing` (in a run, passed and waiting for the PRs ahead, or failing while its
blame is decided), `keepgreen:failed` (it stays after the PR left, until it is queued again);
it is taken off when the PR merges or is cancelled, or when the setting is turned off.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from datetime import datetime, timedelta

import structlog

from keepgreen.app.explain import Explanation, milestone, render
from keepgreen.app.explain_facts import queue_facts
from keepgreen.app.github.api import CheckRunView, GithubApi
from keepgreen.app.github.host import where
from keepgreen.app.ports import Clock, UnitOfWorkFactory
from keepgreen.core.enums import PrState
from keepgreen.core.ids import QueueId
from keepgreen.core.model import GithubFeedback, Queue, QueueEntry, Repository

log = structlog.get_logger(__name__)

# PRs that left the queue this recently still get their final view (a pass missed is retried).
_LEFT_WITHIN = timedelta(minutes=30)
# A check run whose milestone is unchanged is sent again at most this often.
MINOR_CHANGE_SECONDS = 120.0
# The state label of a PR in each state (`stateLabelsEnabled`); none once merged or cancelled.
STATE_LABELS = {
    PrState.NOT_READY: "keepgreen:queued",
    PrState.PENDING: "keepgreen:queued",
    PrState.TESTING: "keepgreen:testing",
    PrState.TESTS_PASSED: "keepgreen:testing",
    PrState.PENDING_FAILURE: "keepgreen:testing",
    PrState.FAILED: "keepgreen:failed",
}


def check_view(explanation: Explanation) -> CheckRunView:
    """The check run that shows an explanation."""
    return CheckRunView(
        status=explanation.progress,
        title=explanation.title,
        summary=explanation.summary,
        conclusion=explanation.verdict,
        details_url=explanation.details_url,
    )


def comment_body(view: CheckRunView, number: int) -> str:
    """The one comment keepgreen keeps on a PR."""
    body = f"**keepgreen** · #{number}: **{view.title}**\n\n{view.summary}"
    if view.details_url:
        body += f"\n\n[CI run]({view.details_url})"
    return body


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
                config.status_check_enabled
                or config.comments_enabled
                or config.state_labels_enabled
            ):
                return
            facts = queue_facts(uow, queue, repository, now, left_within=_LEFT_WITHIN)
            shown = {
                fact.entry.number: uow.github_feedback.get(repository.id, fact.entry.number)
                for fact in facts
            }
        for fact in facts:
            if not fact.entry.is_read:
                continue  # no head to put a check run on until the worker reads the PR
            known = shown[fact.entry.number] or GithubFeedback(repository.id, fact.entry.number)
            wanted = STATE_LABELS.get(fact.entry.state) if config.state_labels_enabled else None
            if wanted != known.state_label:
                known = self._label(repository, fact.entry.number, known, wanted)
            if not (config.status_check_enabled or config.comments_enabled):
                continue
            view, brief = check_view(render(fact)), check_view(render(milestone(fact)))
            head = fact.entry.head_sha
            if known.shown == digest(view, head):
                continue
            minor = known.shown_comment == digest(brief, head)
            since = None if known.shown_at is None else (now - known.shown_at).total_seconds()
            if minor and since is not None and since < MINOR_CHANGE_SECONDS:
                continue  # only the place in line or a check's progress moved: later
            self._show(repository, queue, fact.entry, (view, brief), known, now=now)

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

    def _label(
        self, repository: Repository, number: int, known: GithubFeedback, wanted: str | None
    ) -> GithubFeedback:
        """Put the PR's state label `wanted` in place of the one it carries (None: none)."""
        place = where(repository)
        if known.state_label is not None:
            self._api.remove_label(place, number, known.state_label)
        if wanted is not None:
            self._api.add_label(place, number, wanted)
        with self._uow() as uow:
            current = uow.github_feedback.get(repository.id, number) or known
            uow.github_feedback.save(replace(current, state_label=wanted))
            uow.commit()
        return replace(known, state_label=wanted)

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


__all__ = ["GithubFeedbackPublisher", "check_view", "comment_body", "digest"]
