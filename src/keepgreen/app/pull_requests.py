"""Pull requests in a queue: submit, cancel, restart, read, list, impacted targets."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

import structlog

from keepgreen.app.engine import QueueEngine
from keepgreen.app.errors import Conflict, InvalidInput, NotFound, Unavailable
from keepgreen.app.explain import Explanation, render
from keepgreen.app.explain_facts import entry_facts
from keepgreen.app.incidents import SHOWN_INCIDENTS, concerning
from keepgreen.app.lookup import (
    find_entry,
    find_entry_by_branch,
    find_queue,
    find_queued_entry,
    find_repository,
    for_tokens,
    queued_options,
)
from keepgreen.app.ports import (
    Clock,
    CodeHostError,
    EntryPage,
    IdFactory,
    MergeHost,
    QuickReads,
    UnitOfWork,
    UnitOfWorkFactory,
)
from keepgreen.core.admission import requires_impacted_targets
from keepgreen.core.enums import Mergeability, PrState, QueueState, StateReason
from keepgreen.core.ids import OrgId, PullRequestId
from keepgreen.core.model import (
    ImpactedTargets,
    Incident,
    PullRequestInfo,
    Queue,
    QueueAsk,
    QueuedOptions,
    QueueEntry,
    Readiness,
    RepoRef,
    Repository,
)
from keepgreen.core.names import MAX_NAME_LENGTH, normalize_sha
from keepgreen.core.priority import DEFAULT_PRIORITY, Priority
from keepgreen.core.scheduler import (
    EntrySubmitted,
    ImpactedTargetsSet,
    PrClosed,
    PrHeadMoved,
    RestartRequested,
    UserCancelled,
)

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class QueueTarget:
    """Which queue a request is about."""

    org_id: OrgId
    repo: RepoRef
    branch: str


@dataclass(frozen=True, slots=True)
class ExplainedEntry:
    entry: QueueEntry
    explanation: Explanation
    incidents: tuple[Incident, ...]
    queue_version: int  # the version of the queue it was read at


@dataclass(frozen=True, slots=True)
class Resubmit:
    """A submit as presented: the token, the PR it names, and the options it asks for."""

    token: str
    ask: QueueAsk
    priority: Priority | None
    no_batch: bool | None


class PullRequestService:
    """PR requests of the v1 API. State changes go through the engine (`decide`), in the
    request's transaction; the worker is woken to carry out what was decided.
    """

    def __init__(
        self,
        uow: UnitOfWorkFactory,
        *,
        code_host: MergeHost,
        engine: QueueEngine,
        wake: Callable[[], None],
        clock: Clock,
        new_id: IdFactory,
        quick: QuickReads,
    ) -> None:
        self._uow = uow
        self._quick = quick
        self._code_host = code_host
        self._engine = engine
        self._wake = wake
        self._clock = clock
        self._new_id = new_id

    def changes_nothing(
        self,
        target: QueueTarget,
        number: int,
        *,
        priority: Priority | None = None,
        no_batch: bool | None = None,
    ) -> bool:
        """Whether submitting would change nothing: the PR is in the queue with the same
        priority and noBatch (the merge button pressed again, a bot's retry). One read, no
        transaction; the 404s of `submit`.
        """
        found = queued_options(self._quick, target.org_id, target.repo, target.branch, number)
        return _unchanged(found, priority, no_batch)

    async def resubmits_changing_nothing(self, asked: Sequence[Resubmit]) -> list[bool]:
        """`changes_nothing` of each resubmit for the org of the presented token it comes with,
        the tokens checked in the same read, all in one: False for a token that is not live or
        a queue its org does not have too (the full submit refuses those).
        """
        found = await for_tokens(
            self._quick.token_queued_options, [(one.token, one.ask) for one in asked]
        )
        return [
            read is not None and _unchanged(read[1], one.priority, one.no_batch)
            for one, read in zip(asked, found, strict=True)
        ]

    def submit(
        self,
        target: QueueTarget,
        number: int,
        *,
        priority: Priority | None = None,
        no_batch: bool | None = None,
    ) -> QueueEntry:
        """Submit a PR. A PR already in the queue gets its priority/noBatch updated; a PR that
        left the queue starts a new episode on the same entry.

        A resubmit of a PR in the queue asks nothing of the code host; one that changes
        nothing (the merge button pressed again, a bot's retry) is one read and writes nothing.
        """
        with self._uow(read_only=True) as uow:
            repository = find_repository(uow, target.org_id, target.repo)
            queue = find_queue(uow, repository, target.branch)
            existing = uow.entries.find(queue.id, number)
        if existing is not None and not existing.state.is_terminal:
            if _same_options(existing.priority, existing.no_batch, priority, no_batch):
                return existing
            return self._resubmit(target, repository, number, priority, no_batch)
        # Ask the code host outside any transaction: git may take a while.
        info = self._read_pull_request(repository, number)
        mergeability = self._mergeability(repository, info, target.branch)
        up_to_date = self._is_up_to_date(repository, info, target.branch)
        with self._uow() as uow:
            queue = find_queue(uow, repository, target.branch, lock=True)
            existing = uow.entries.find(queue.id, number)
            if existing is not None and not existing.state.is_terminal:
                # Entered the queue while the code host was asked: a resubmit after all.
                self._update_queued(uow, queue, existing, priority, no_batch)
            else:
                if queue.state is QueueState.DRAINING:
                    raise Conflict(
                        "queue_draining",
                        f"the queue for {queue.branch!r} is draining and accepts no new PRs",
                    )
                if (
                    existing is not None
                    and existing.state is PrState.MERGED
                    and existing.head_sha == info.head_sha
                ):
                    raise Conflict("already_merged", f"pull request #{number} is already merged")
                self._new_episode(
                    uow,
                    queue,
                    existing,
                    info,
                    mergeability=mergeability,
                    is_up_to_date=up_to_date,
                    priority=priority or DEFAULT_PRIORITY,
                    no_batch=bool(no_batch),
                )
            entry = uow.entries.get(existing.id) if existing else uow.entries.find(queue.id, number)
            uow.commit()
        self._wake()
        assert entry is not None  # noqa: S101 - written just above in this transaction
        return entry

    def _resubmit(
        self,
        target: QueueTarget,
        repository: Repository,
        number: int,
        priority: Priority | None,
        no_batch: bool | None,
    ) -> QueueEntry:
        """A new priority or noBatch for a PR in the queue; a PR that left it meanwhile is
        submitted anew.
        """
        with self._uow() as uow:
            queue = find_queue(uow, repository, target.branch, lock=True)
            existing = uow.entries.find(queue.id, number)
            if existing is not None and not existing.state.is_terminal:
                self._update_queued(uow, queue, existing, priority, no_batch)
                entry = uow.entries.get(existing.id)
                uow.commit()
                self._wake()
                return entry
        return self.submit(target, number, priority=priority, no_batch=no_batch)

    def _update_queued(
        self,
        uow: UnitOfWork,
        queue: Queue,
        existing: QueueEntry,
        priority: Priority | None,
        no_batch: bool | None,
    ) -> None:
        updated = replace(
            existing,
            priority=priority or existing.priority,
            no_batch=existing.no_batch if no_batch is None else no_batch,
        )
        self._engine.advance(uow, queue, EntrySubmitted(updated, new_episode=False))

    def cancel(self, target: QueueTarget, number: int) -> QueueEntry:
        """Take a PR out of its queue (404 when it is not in it)."""
        with self._uow() as uow:
            queue = self._queue(uow, target, lock=True)
            entry = find_queued_entry(uow, queue, number)
            self._engine.advance(uow, queue, UserCancelled(number))
            entry = uow.entries.get(entry.id)
            uow.commit()
        self._wake()
        return entry

    def observed(self, target: QueueTarget, event: PrClosed | PrHeadMoved) -> bool:
        """Feed what the code host said about a PR (closed, pushed to) to its queue, as the
        worker would at its next look; False when the PR is not in the queue (nothing to do).
        """
        with self._uow() as uow:
            repository = find_repository(uow, target.org_id, target.repo)
            queue = uow.queues.find(repository.id, target.branch, lock=True)
            if queue is None:
                return False
            entry = uow.entries.find(queue.id, event.number)
            if entry is None or entry.state.is_terminal:
                return False
            self._engine.advance(uow, queue, event)
            uow.commit()
        self._wake()
        return True

    def restart(self, target: QueueTarget, number: int) -> QueueEntry:
        """Ask for a PR's tests to run again; only a PR being tested or decided can restart."""
        with self._uow() as uow:
            queue = self._queue(uow, target, lock=True)
            entry = find_queued_entry(uow, queue, number)
            if not entry.state.is_started:
                raise Conflict(
                    "not_restartable",
                    f"pull request #{number} is {entry.state.value}; only a PR that is testing, "
                    "tests_passed or pending_failure can restart its tests",
                )
            self._engine.advance(uow, queue, RestartRequested(number))
            entry = uow.entries.get(entry.id)
            uow.commit()
        self._wake()
        return entry

    def get(self, target: QueueTarget, number: int) -> QueueEntry:
        with self._uow(read_only=True) as uow:
            return find_entry(uow, self._queue(uow, target), number)

    def number_from_branch(self, target: QueueTarget, branch: str) -> int:
        """The number of the PR submitted from `branch`: the one in the queue if there is one,
        else the one that left it last (404 if none ever was).
        """
        with self._uow(read_only=True) as uow:
            return find_entry_by_branch(uow, self._queue(uow, target), branch).number

    def get_explained(self, target: QueueTarget, number: int) -> ExplainedEntry:
        """The entry, what it waits on or why it left in plain words, and the git server
        incidents that concern it since it was submitted.
        """
        with self._uow(read_only=True) as uow:
            repository = find_repository(uow, target.org_id, target.repo)
            queue = find_queue(uow, repository, target.branch)
            entry = find_entry(uow, queue, number)
            recent = uow.incidents.recent(queue.id, limit=SHOWN_INCIDENTS, since=entry.submitted_at)
            facts = entry_facts(uow, queue, repository, entry, self._clock())
        return ExplainedEntry(entry, render(facts), concerning(recent, entry), queue.version)

    def list(
        self,
        target: QueueTarget,
        *,
        state: PrState | None,
        concluded_since: datetime | None,
        cursor: PullRequestId | None,
        take: int,
    ) -> EntryPage:
        with self._uow(read_only=True) as uow:
            queue = self._queue(uow, target)
            if cursor is not None and not uow.entries.exists(queue.id, cursor):
                raise NotFound("cursor_not_found", "cursor does not name a PR of this queue")
            return uow.entries.page(
                queue.id, state=state, concluded_since=concluded_since, cursor=cursor, take=take
            )

    def set_impacted_targets(
        self, target: QueueTarget, number: int, sha: str, targets: tuple[str, ...] | None
    ) -> None:
        """Store the targets of a PR head (None: impacts everything); the last upload wins."""
        head_sha = normalize_sha(sha)
        if head_sha is None:
            raise InvalidInput("invalid_field", "pr.sha must be a hex commit sha (4-64 digits)")
        with self._uow() as uow:
            queue = self._queue(uow, target, lock=True)
            uow.impacted_targets.upsert(
                ImpactedTargets(queue.id, number, head_sha, targets, self._clock())
            )
            self._engine.advance(uow, queue, ImpactedTargetsSet(number, head_sha, targets))
            uow.commit()
        self._wake()

    # -- helpers -------------------------------------------------------------------------------

    def _queue(self, uow: UnitOfWork, target: QueueTarget, *, lock: bool = False) -> Queue:
        return find_queue(
            uow, find_repository(uow, target.org_id, target.repo), target.branch, lock=lock
        )

    def _read_pull_request(self, repository: Repository, number: int) -> PullRequestInfo:
        try:
            info = self._code_host.pull_request(repository, number)
        except CodeHostError as error:
            raise _unavailable(repository, error) from error
        if info is None:
            raise NotFound(
                "pull_request_not_found",
                f"pull request #{number} does not exist in {repository.ref} "
                f"(no ref {repository.pull_request_ref(number)})",
            )
        return info

    def _mergeability(
        self, repository: Repository, info: PullRequestInfo, branch: str
    ) -> Mergeability:
        try:
            return self._code_host.mergeability(
                repository, head_sha=info.head_sha, target_branch=branch
            )
        except CodeHostError as error:
            raise _unavailable(repository, error) from error

    def _new_episode(
        self,
        uow: UnitOfWork,
        queue: Queue,
        previous: QueueEntry | None,
        info: PullRequestInfo,
        *,
        mergeability: Mergeability,
        is_up_to_date: bool,
        priority: Priority,
        no_batch: bool,
    ) -> None:
        now = self._clock()
        has_targets = uow.impacted_targets.find(queue.id, info.number, info.head_sha) is not None
        readiness = Readiness(
            does_base_branch_match=True,  # the built-in host's PRs are based on the queue branch
            mergeability=mergeability,
            requires_impacted_targets=requires_impacted_targets(queue),
            has_impacted_targets=has_targets,
        )
        entry = QueueEntry(
            id=previous.id if previous is not None else PullRequestId(self._new_id()),
            queue_id=queue.id,
            number=info.number,
            state=PrState.NOT_READY,
            state_changed_at=now,
            state_reason=StateReason.SUBMITTED,
            priority=priority,
            no_batch=no_batch,
            head_sha=info.head_sha,
            title=info.title,
            author=info.author,
            # A branch longer than a stored name (git allows it) is not kept: such a PR is
            # found by its number only.
            head_branch=(
                info.head_branch
                if info.head_branch and len(info.head_branch) <= MAX_NAME_LENGTH
                else None
            ),
            base_branch=queue.branch,
            readiness=readiness,
            is_submitted=True,
            force_enqueued=False,
            position=uow.queues.next_position(queue.id),
            submitted_at=now,
            is_up_to_date=is_up_to_date,
        )
        if previous is None:
            uow.entries.add(entry)
        else:
            uow.entries.save(entry)
        previous_state = None if previous is None else previous.state
        self._engine.advance(uow, queue, EntrySubmitted(entry, previous_state=previous_state))

    def _is_up_to_date(self, repository: Repository, info: PullRequestInfo, branch: str) -> bool:
        try:
            return self._code_host.is_up_to_date(
                repository, head_sha=info.head_sha, target_branch=branch
            )
        except CodeHostError as error:
            raise _unavailable(repository, error) from error


def _unavailable(repository: Repository, error: CodeHostError) -> Unavailable:
    """The 503 for a code host that cannot be read. Its words (paths on the server, git's
    messages) go to the server's log, not to the API client.
    """
    log.warning("git data unreadable", repo=str(repository.ref), error=str(error))
    return Unavailable(
        "code_host_unavailable",
        f"the git data of {repository.ref} cannot be read right now; "
        "the server's log says why, and the request can be retried",
    )


def _unchanged(found: QueuedOptions, priority: Priority | None, no_batch: bool | None) -> bool:
    """Whether a resubmit asking for these options leaves the PR `found` read as it is."""
    if found.state is None or found.state.is_terminal or found.priority is None:
        return False
    return _same_options(found.priority, found.no_batch, priority, no_batch)


def _same_options(
    priority: Priority, no_batch: bool, asked_priority: Priority | None, asked_no_batch: bool | None
) -> bool:
    """Whether a resubmit asking for these options (None: keep) leaves a queued PR as it is."""
    return (asked_priority is None or asked_priority == priority) and (
        asked_no_batch is None or asked_no_batch == no_batch
    )
