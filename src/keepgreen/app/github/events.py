"""The worker's side of GitHub webhooks: each stored delivery acted on once.

Deliveries are hints: a PR closed or pushed to is fed to its queue at once, a comment or a
label queues or cancels (the label is the one of the queue for the PR's base branch, and a queue
may let the bots it lists queue and cancel without the write permission people need), a check
run or status on a test branch is stored as CI's answer (the path `setCommitStatus` takes). The
worker's own reconcile pass reads what it needs from GitHub at a bounded rate, so a lost
delivery delays, never loses. A delivery is claimed by one worker; when GitHub fails while
acting on it, the claim is given back and a later pass tries again.

Only events about repositories of the delivery's own installation are acted on: a payload can
never reach another installation's (another org's) repositories.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import structlog

from keepgreen.app.errors import Conflict, KeepgreenError, NotFound
from keepgreen.app.github.api import MAY_MERGE, GithubApi, GithubPull, GithubUnavailable, Where
from keepgreen.app.github.installations import GithubInstallations
from keepgreen.app.ports import Clock, CodeHostError, UnitOfWorkFactory
from keepgreen.app.pull_requests import PullRequestService, QueueTarget
from keepgreen.app.testing import StatusService
from keepgreen.core.enums import CommitState
from keepgreen.core.github_commands import (
    CancelCommand,
    CommandError,
    MergeCommand,
    parse_command,
)
from keepgreen.core.model import GithubDelivery, QueueConfig, Repository
from keepgreen.core.names import normalize_sha
from keepgreen.core.priority import Priority
from keepgreen.core.scheduler import PrClosed, PrHeadMoved

log = structlog.get_logger(__name__)

# GitHub's check run conclusions as commit states. `neutral` and `skipped` pass on GitHub; in
# keepgreen they pass a test run only where the queue accepts skipped checks (no vacuous green).
_CONCLUSIONS: dict[str, CommitState] = {
    "success": CommitState.SUCCESS,
    "neutral": CommitState.NEUTRAL,
    "skipped": CommitState.SKIPPED,
    "failure": CommitState.FAILURE,
    "timed_out": CommitState.FAILURE,
    "cancelled": CommitState.FAILURE,
    "action_required": CommitState.FAILURE,
    "startup_failure": CommitState.FAILURE,
    "stale": CommitState.FAILURE,
}
_STATUSES: dict[str, CommitState] = {
    "pending": CommitState.PENDING,
    "success": CommitState.SUCCESS,
    "failure": CommitState.FAILURE,
    "error": CommitState.ERROR,
}
_BATCH = 50  # deliveries taken per pass
_MAX_WAIT_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class _Pr:
    """The PR an event is about, in a repository of the delivery's installation."""

    repository: Repository
    where: Where
    number: int


@dataclass(frozen=True, slots=True)
class _Sender:
    """Who commented or labelled: GitHub's login (None when the payload has none) and whether
    GitHub says it is a bot (an App's account, `name[bot]`).
    """

    login: str | None
    is_bot: bool

    @property
    def name(self) -> str:
        return self.login or "someone"


class GithubEvents:
    """Acts on stored deliveries; `process_pending` is called by the worker at each pass."""

    def __init__(
        self,
        uow: UnitOfWorkFactory,
        *,
        api: GithubApi,
        installations: GithubInstallations,
        pull_requests: PullRequestService,
        statuses: StatusService,
        clock: Clock,
        merge_label: str,
        own_check_name: str,
        wake: Callable[[], None],
        forget: Callable[[Repository, int], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._uow = uow
        self._api = api
        self._installations = installations
        self._pull_requests = pull_requests
        self._statuses = statuses
        self._clock = clock
        self._merge_label = merge_label
        self._own_check_name = own_check_name
        self._wake = wake
        self._forget = forget  # the GitHub host re-reads the PR at its next look
        self._monotonic = monotonic
        # GitHub failing: deliveries wait 1, 2, 4, ... s (at most a minute), or as long as
        # GitHub asked, instead of asking again at every pass.
        self._failures = 0
        self._resume_at = 0.0

    def process_pending(self) -> int:
        """Act on the deliveries waiting, oldest first; how many were done. Stops at the first
        that GitHub's failure leaves undone (it and those after it wait for a later pass, after
        a backoff).
        """
        if self._monotonic() < self._resume_at:
            return 0
        with self._uow() as uow:
            pending = uow.github_deliveries.pending(limit=_BATCH)
        done = 0
        for delivery in pending:
            with self._uow() as uow:
                claimed = uow.github_deliveries.claim(delivery.id, at=self._clock())
                uow.commit()
            if not claimed:
                continue  # another worker has it
            try:
                self._act(delivery)
            except GithubUnavailable as error:
                with self._uow() as uow:
                    uow.github_deliveries.release(delivery.id)
                    uow.commit()
                self._failures += 1
                wait = min(2.0 ** (self._failures - 1), _MAX_WAIT_SECONDS)
                if error.retry_after is not None:
                    wait = max(wait, min(error.retry_after, 3600.0))
                self._resume_at = self._monotonic() + wait
                log.warning(
                    "github delivery waits; github is failing",
                    delivery=delivery.id,
                    github_event=delivery.event,
                    error=str(error),
                    retry_in_seconds=round(wait, 1),
                )
                return done
            except (KeepgreenError, CodeHostError) as error:
                # Acted on as far as it can be: a refusal is final (the reconcile pass and
                # the next delivery about the PR see the state as it is then).
                log.warning(
                    "github delivery refused",
                    delivery=delivery.id,
                    github_event=delivery.event,
                    error=str(error),
                )
            except Exception:
                # A bug meets this delivery: it stays processed, so that it cannot hold up
                # every delivery after it; the log has what is needed to look into it.
                log.exception(
                    "github delivery failed", delivery=delivery.id, github_event=delivery.event
                )
            self._failures = 0
            done += 1
        return done

    # -- events ------------------------------------------------------------------------------

    def _act(self, delivery: GithubDelivery) -> None:
        match delivery.event:
            case "installation" | "installation_repositories":
                self._installation(delivery)
            case "issue_comment":
                self._comment(delivery)
            case "pull_request":
                self._pull_request(delivery)
            case "check_run":
                self._check_run(delivery)
            case "status":
                self._status(delivery)
            case "push" | "check_suite":
                # The worker's pass reads the branch (push) and each run's statuses; being
                # woken is all it needs.
                self._wake()
            case _:
                log.info("github delivery not acted on", github_event=delivery.event)

    def _installation(self, delivery: GithubDelivery) -> None:
        installation = _object(delivery.payload, "installation")
        account = _text(_object(installation, "account"), "login")
        installation_id = delivery.installation_id
        if installation_id is None:
            return
        if delivery.event == "installation" and delivery.action == "deleted":
            self._installations.uninstalled(installation_id)
            return
        if delivery.action in {"suspend", "unsuspend"}:
            log.info("github installation", action=delivery.action, installation=installation_id)
            return
        if account is None:
            return
        self._installations.installed(installation_id, account)

    def _comment(self, delivery: GithubDelivery) -> None:
        payload = delivery.payload
        issue = _object(payload, "issue")
        comment = _object(payload, "comment")
        if delivery.action != "created" or "pull_request" not in issue:
            return  # a comment on an issue, or an edit: no command
        author = _sender(_object(comment, "user"))
        command = parse_command(_text(comment, "body") or "")
        if command is None:
            return
        pr = self._pr(delivery, _number(issue))
        if pr is None:
            return
        if isinstance(command, CommandError):
            if not author.is_bot:  # a bot reads no usage
                self._reply(pr, f"@{author.name} {command.message}")
            return
        # The queue the command is about is the one of the PR's base branch as GitHub says now.
        pull = self._api.pull_request(pr.where, pr.number)
        if pull is None:
            return
        config = self._config(pr, pull.base_ref)
        if author.is_bot and not _lists(config, author):
            # keepgreen's own replies and other Apps' comments are not commands: only the bots
            # the queue lists are heard, and the others are not answered (no bot talks to
            # another without end).
            return
        if config is not None and not config.commands_enabled:
            # The queue takes no comment commands (`commandsEnabled` off): a person is told
            # why nothing happens and what still works; a bot is not answered.
            if not author.is_bot:
                self._reply(
                    pr,
                    f"@{author.name} the merge queue for `{pull.base_ref}` takes no comment "
                    "commands (its commandsEnabled setting is off); its label, the dashboard "
                    "or the API still queue and cancel pull requests.",
                )
            log.info("github command ignored: commands off", pr=pr.number, branch=pull.base_ref)
            return
        if not self._may_merge(pr, author, config):
            return
        match command:
            case MergeCommand(priority=priority, no_batch=no_batch):
                self._submit(pr, pull, author.name, priority=priority, no_batch=no_batch)
            case CancelCommand():
                self._cancel(pr, author.name, quiet=False, branch=pull.base_ref)

    def _pull_request(self, delivery: GithubDelivery) -> None:
        payload = delivery.payload
        pull = _object(payload, "pull_request")
        pr = self._pr(delivery, _number(pull))
        if pr is None:
            return
        if self._forget is not None:
            self._forget(pr.repository, pr.number)
        base = _text(_object(pull, "base"), "ref")
        sender = _sender(_object(payload, "sender"))
        label = _text(_object(payload, "label"), "name")
        match delivery.action:
            case "labeled" | "unlabeled" if label is not None and base is not None:
                self._label(pr, sender, label=label, base=base, added=delivery.action == "labeled")
            case "closed" if base is not None:
                self._pull_requests.observed(self._target(pr, base), PrClosed(pr.number))
            case "synchronize" if base is not None:
                head = normalize_sha(_text(payload, "after") or "")
                if head is not None:
                    target = self._target(pr, base)
                    self._pull_requests.observed(target, PrHeadMoved(pr.number, head))
            case "edited":
                # A new base branch: the PR leaves the old branch's queue.
                changes = _object(payload, "changes")
                old_base = _text(_object(_object(changes, "base"), "ref"), "from")
                if old_base is not None:
                    self._cancel(pr, sender.name, quiet=True, branch=old_base)
            case _:
                self._wake()

    def _label(self, pr: _Pr, sender: _Sender, *, label: str, base: str, added: bool) -> None:
        """A label added to or removed from a PR whose base is `base` (as the payload says).

        The label that queues is the one of the queue for `base`: its `enqueueing_label`, else
        the instance's; a queue with `label_commands_enabled` off takes no label at all. A base
        without a queue answers the instance's label as before (adding it is told there is no
        queue); any other label only wakes the worker.
        """
        config = self._config(pr, base)
        if config is None:
            wanted, enabled = self._merge_label, True
        else:
            wanted = config.enqueueing_label or self._merge_label
            enabled = config.label_commands_enabled
        if label != wanted or not enabled:
            self._wake()
            return
        if not added:
            # Removing a label takes triage permission on GitHub itself: no check here.
            self._cancel(pr, sender.name, quiet=True, branch=base)
            return
        if not self._may_merge(pr, sender, config):
            return
        pull = self._api.pull_request(pr.where, pr.number)
        if pull is None:
            return
        if config is not None and pull.base_ref != base:
            # The PR left `base` since it was labelled: the queue that allowed it is not the one
            # it would join (the `edited` delivery takes it out of the old one).
            log.info("github label for a base the pr has left", pr=pr.number)
            return
        self._submit(pr, pull, sender.name, priority=None, no_batch=None)

    def _check_run(self, delivery: GithubDelivery) -> None:
        run = _object(delivery.payload, "check_run")
        name = _text(run, "name")
        if name is None or name == self._own_check_name:
            return  # keepgreen's own check run on the PR is not CI
        if _text(run, "status") != "completed":
            state = CommitState.PENDING
        else:
            state = _CONCLUSIONS.get(_text(run, "conclusion") or "", CommitState.FAILURE)
        output = _object(run, "output")
        self._record(
            delivery,
            sha=_text(run, "head_sha"),
            context=name,
            state=state,
            target_url=_text(run, "details_url") or _text(run, "html_url"),
            description=_text(output, "title"),
        )

    def _status(self, delivery: GithubDelivery) -> None:
        payload = delivery.payload
        state = _STATUSES.get(_text(payload, "state") or "")
        context = _text(payload, "context")
        if state is None or context is None:
            return
        self._record(
            delivery,
            sha=_text(payload, "sha"),
            context=context,
            state=state,
            target_url=_text(payload, "target_url"),
            description=_text(payload, "description"),
        )

    def _record(
        self,
        delivery: GithubDelivery,
        *,
        sha: str | None,
        context: str,
        state: CommitState,
        target_url: str | None,
        description: str | None,
    ) -> None:
        repositories = self._repositories(delivery)
        if sha is None or not repositories:
            return
        for repository in repositories:
            self._statuses.set_commit_status(
                repository.org_id,
                repository.ref,
                sha=sha,
                context=context[:255],
                state=state,
                target_url=(target_url or None) and target_url[:2000],
                description=(description or None) and description[:2000],
            )

    # -- acting on a PR ----------------------------------------------------------------------

    def _may_merge(self, pr: _Pr, sender: _Sender, config: QueueConfig | None) -> bool:
        """Whether `sender` may queue and cancel in the queue of `config` (None: the base has no
        queue); a polite reply if not. A login the queue's `allowed_bot_submitters` lists may;
        any other bot may not (bots have no collaborator permission to ask about); anyone else
        needs write permission on the repository.
        """
        if _lists(config, sender):
            return True
        user = sender.name
        if sender.is_bot:
            self._reply(
                pr,
                f"@{user} keepgreen takes pull requests from a bot only when the merge queue "
                f"lists it: add `{user}` to the queue's allowedBotSubmitters to let it queue "
                "and cancel pull requests.",
            )
            log.info("github command refused: bot not listed", user=user, pr=pr.number)
            return False
        if self._api.permission(pr.where, user) in MAY_MERGE:
            return True
        self._reply(
            pr,
            f"@{user} only people with write access to {pr.where.owner}/{pr.where.name} can "
            "queue or cancel pull requests with keepgreen. A maintainer can comment "
            "`/keepgreen merge` for you.",
        )
        log.info("github command refused: no write permission", user=user, pr=pr.number)
        return False

    def _submit(
        self,
        pr: _Pr,
        pull: GithubPull,
        user: str,
        *,
        priority: Priority | None,
        no_batch: bool | None,
    ) -> None:
        if pull.state != "open":
            self._reply(pr, f"@{user} this pull request is not open, so it cannot be queued.")
            return
        try:
            self._pull_requests.submit(
                self._target(pr, pull.base_ref),
                pr.number,
                priority=priority,
                no_batch=no_batch,
            )
        except NotFound as missing:
            self._reply(
                pr,
                f"@{user} keepgreen has no merge queue for `{pull.base_ref}` in "
                f"{pr.where.owner}/{pr.where.name} ({missing.message}).",
            )
            return
        except Conflict as refused:
            self._reply(pr, f"@{user} this pull request cannot be queued: {refused.message}.")
            return
        log.info("github pr queued", pr=pr.number, user=user, branch=pull.base_ref)

    def _cancel(self, pr: _Pr, user: str, *, quiet: bool, branch: str | None = None) -> None:
        if branch is None:
            pull = self._api.pull_request(pr.where, pr.number)
            if pull is None:
                return
            branch = pull.base_ref
        try:
            self._pull_requests.cancel(self._target(pr, branch), pr.number)
        except NotFound:
            if not quiet:
                self._reply(pr, f"@{user} this pull request is not in a keepgreen queue.")
            return
        log.info("github pr cancelled", pr=pr.number, user=user, branch=branch)

    def _reply(self, pr: _Pr, body: str) -> None:
        self._api.create_comment(pr.where, pr.number, body)

    # -- finding things ----------------------------------------------------------------------

    def _repositories(self, delivery: GithubDelivery) -> list[Repository]:
        """The repositories the event is about, among the delivery's installation's."""
        repository = _object(delivery.payload, "repository")
        owner = _text(_object(repository, "owner"), "login")
        name = _text(repository, "name")
        if owner is None or name is None or delivery.installation_id is None:
            return []
        with self._uow() as uow:
            found = uow.github_installations.by_github_name(owner, name)
        mine = [r for r in found if r.github_installation_id == delivery.installation_id]
        if not mine:
            log.info(
                "github event for a repository keepgreen does not queue",
                repository=f"{owner}/{name}",
                installation=delivery.installation_id,
            )
        return mine

    def _pr(self, delivery: GithubDelivery, number: int | None) -> _Pr | None:
        repositories = self._repositories(delivery)
        if number is None or not repositories or delivery.installation_id is None:
            return None
        repository = repositories[0]
        where = Where(delivery.installation_id, repository.ref.owner, repository.ref.name)
        return _Pr(repository, where, number)

    def _config(self, pr: _Pr, branch: str) -> QueueConfig | None:
        """The settings of the repository's queue for `branch`; None when there is none."""
        with self._uow() as uow:
            queue = uow.queues.find(pr.repository.id, branch)
        return None if queue is None else queue.config

    def _target(self, pr: _Pr, branch: str) -> QueueTarget:
        return QueueTarget(pr.repository.org_id, pr.repository.ref, branch)


def _sender(user: Mapping[str, object]) -> _Sender:
    """A payload's user object (`sender`, a comment's `user`) as a `_Sender`."""
    login = _text(user, "login") or None
    is_bot = user.get("type") == "Bot" or (login or "").endswith("[bot]")
    return _Sender(login, is_bot)


def _lists(config: QueueConfig | None, sender: _Sender) -> bool:
    """Whether `sender` is a bot the queue's allowed_bot_submitters names (logins are
    case-blind). A person named there is not a bot: write access is still asked of them.
    """
    if config is None or sender.login is None or not sender.is_bot:
        return False
    login = sender.login.casefold()
    return any(allowed.casefold() == login for allowed in config.allowed_bot_submitters)


def _object(payload: Mapping[str, object], key: str) -> Mapping[str, object]:
    value = payload.get(key)
    return value if isinstance(value, Mapping) else {}


def _text(payload: Mapping[str, object], key: str) -> str | None:
    value = payload.get(key)
    return value if isinstance(value, str) else None


def _number(payload: Mapping[str, object]) -> int | None:
    value = payload.get("number")
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**31:
        return value
    return None


__all__ = ["GithubEvents"]
