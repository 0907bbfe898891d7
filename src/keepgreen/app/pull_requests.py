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
    FirstEntries,
    IdFactory,
    MergeHost,
    QuickReads,
    UnitOfWork,
    UnitOfWorkFactory,
)
from keepgreen.core.admission import requires_impacted_targets
from keepgreen.core.enums import Mergeability, PrState, QueueState, StateReason
from keepgreen.core.ids import OrgId, PullRequestId, QueueId
from keepgreen.core.model import (
    UNREAD_HEAD,
    ImpactedTargets,
    Incident,
    PullRequestInfo,
    Queue,
    QueueAsk,
    QueuedOptions,
    QueueEntry,
    QueueModes,
    Readiness,
    RepoRef,
    Repository,
    recorded_branch,
)
from keepgreen.core.names import normalize_sha
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
class SubmitAsk:
    """A submit as presented: the token, the PR it names, and the options it asks for."""

    token: str
    ask: QueueAsk
    priority: Priority | None
    no_batch: bool | None


@dataclass(frozen=True, slots=True)
class FirstSubmit:
    """A submit of a PR its queue has never had, as a quick read found it: the PR, its queue
    as read (the token's org's) and the options asked for (`submit_first` writes it).
    """

    ask: QueueAsk
    queue_id: QueueId
    queue: QueueModes
    priority: Priority | None
    no_batch: bool | None


# What a quick read found of a submit (`read_submits`): True, it changes nothing (the PR is in
# the queue with those options); a `FirstSubmit`, the PR was never in the queue; False, anything
# else (a resubmit that changes something, a PR that left, a token or queue not found), which
# the full `submit` answers.
SubmitRead = bool | FirstSubmit


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
        first_entries: FirstEntries,
    ) -> None:
        self._uow = uow
        self._quick = quick
        self._first_entries = first_entries
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

    async def read_submits(self, asked: Sequence[SubmitAsk]) -> list[SubmitRead]:
        """What each submit is, for the org of the presented token it comes with (see
        `SubmitRead`), the tokens checked in the same read, all in one: False for a token that
        is not live or a queue its org does not have (the full submit refuses those).
        """
        found = await for_tokens(
            self._quick.token_queued_options, [(one.token, one.ask) for one in asked]
        )
        return [_submit_read(one, read) for one, read in zip(asked, found, strict=True)]

    async def submit_first(self, asked: Sequence[FirstSubmit]) -> list[bool]:
        """Enter PRs their queue has never had, as `submit` does, each queue's in one
        transaction of its own (the merge buttons of one moment), and wake the worker once.
        False for a PR found otherwise when written (submitted meanwhile, twice in `asked`,
        its queue draining, changing modes or gone), which the full `submit` answers.
        """
        entered = [False] * len(asked)
        by_queue: dict[QueueId, list[int]] = {}
        for index, one in enumerate(asked):
            by_queue.setdefault(one.queue_id, []).append(index)
        for indexes in by_queue.values():
            for index in await self._enter_first(asked, indexes):
                entered[index] = True
        if any(entered):
            self._wake()
        return entered

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

        One short transaction, which asks nothing of the code host and decides nothing for a
        new episode: the PR enters `not_ready` at once, and the worker, woken, reads it (its
        head, title, author, whether it merges) and admits it; a PR that does not exist leaves
        as `pr_not_found`. Only a PR whose last episode merged is read here first, outside
        the transaction, to refuse it (409) when its head is the merged one. A resubmit that
        changes nothing (the merge button pressed again, a bot's retry) writes nothing.
        """
        try:
            return self._submit(target, number, priority, no_batch, None)
        except _MergedBefore as merged:
            info = self._read_pull_request(merged.repository, number)
        return self._submit(target, number, priority, no_batch, info)

    def _submit(
        self,
        target: QueueTarget,
        number: int,
        priority: Priority | None,
        no_batch: bool | None,
        info: PullRequestInfo | None,
    ) -> QueueEntry:
        """`submit` in one transaction; `_MergedBefore` when the PR must be read first."""
        with self._uow() as uow:
            repository = find_repository(uow, target.org_id, target.repo)
            queue = find_queue(uow, repository, target.branch, lock=True)
            existing = uow.entries.find(queue.id, number)
            if existing is not None and not existing.state.is_terminal:
                if _same_options(existing.priority, existing.no_batch, priority, no_batch):
                    return existing
                self._update_queued(uow, queue, existing, priority, no_batch)
                entry = uow.entries.get(existing.id)
            else:
                if queue.state is QueueState.DRAINING:
                    raise Conflict(
                        "queue_draining",
                        f"the queue for {queue.branch!r} is draining and accepts no new PRs",
                    )
                if existing is not None and existing.state is PrState.MERGED:
                    if info is None:
                        raise _MergedBefore(repository)
                    if existing.head_sha == info.head_sha:
                        raise Conflict(
                            "already_merged", f"pull request #{number} is already merged"
                        )
                entry = self._new_episode(
                    uow,
                    repository,
                    queue,
                    existing,
                    number,
                    info,
                    priority=priority or DEFAULT_PRIORITY,
                    no_batch=bool(no_batch),
                )
            uow.commit()
        self._wake()
        return entry

    async def _enter_first(self, asked: Sequence[FirstSubmit], indexes: list[int]) -> list[int]:
        """`submit_first` of the PRs `asked[indexes]` of one queue: the indexes entered."""
        first = asked[indexes[0]]
        new: dict[int, int] = {}  # number -> index, the first time asked
        for index in indexes:
            new.setdefault(asked[index].ask.number, index)
        entries = [
            self._submitted(
                first.queue_id,
                first.ask.branch,
                PullRequestId(self._new_id()),
                number,
                None,
                priority=asked[index].priority or DEFAULT_PRIORITY,
                no_batch=bool(asked[index].no_batch),
                requires_targets=requires_impacted_targets(first.queue),
                has_targets=False,
                position=position,
            )
            for position, (number, index) in enumerate(new.items(), start=1)
        ]
        changed = self._engine.entering_new(entries)
        written = await self._first_entries.enter_first(
            first.queue_id,
            first.queue,
            [entry for entry, _change in changed],
            [change for _entry, change in changed],
        )
        self._engine.entered(first.ask.ref, [one for one in changed if one[0].id in written])
        return [
            index for entry, index in zip(entries, new.values(), strict=True) if entry.id in written
        ]

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

    def _new_episode(
        self,
        uow: UnitOfWork,
        repository: Repository,
        queue: Queue,
        previous: QueueEntry | None,
        number: int,
        info: PullRequestInfo | None,
        *,
        priority: Priority,
        no_batch: bool,
    ) -> QueueEntry:
        """Enter PR `number` for a new episode, unread unless `info` was read already."""
        has_targets = info is not None and (
            uow.impacted_targets.find(queue.id, number, info.head_sha) is not None
        )
        entry = self._submitted(
            queue.id,
            queue.branch,
            PullRequestId(self._new_id()) if previous is None else previous.id,
            number,
            info,
            priority=priority,
            no_batch=no_batch,
            requires_targets=requires_impacted_targets(queue),
            has_targets=has_targets,
            position=uow.queues.next_position(queue.id),
        )
        return self._engine.enter(uow, repository, entry, previous)

    def _submitted(
        self,
        queue_id: QueueId,
        branch: str,
        entry_id: PullRequestId,
        number: int,
        info: PullRequestInfo | None,
        *,
        priority: Priority,
        no_batch: bool,
        requires_targets: bool,
        has_targets: bool,
        position: int,
    ) -> QueueEntry:
        """PR `number` as it enters the queue of `branch`, `not_ready`, unread unless `info`
        was read.
        """
        now = self._clock()
        readiness = Readiness(
            does_base_branch_match=True,  # the built-in host's PRs are based on the queue branch
            mergeability=Mergeability.UNSPECIFIED,  # the worker asks the code host
            requires_impacted_targets=requires_targets,
            has_impacted_targets=has_targets,
        )
        return QueueEntry(
            id=entry_id,
            queue_id=queue_id,
            number=number,
            state=PrState.NOT_READY,
            state_changed_at=now,
            state_reason=StateReason.SUBMITTED,
            priority=priority,
            no_batch=no_batch,
            head_sha=UNREAD_HEAD if info is None else info.head_sha,
            title="" if info is None else info.title,
            author="" if info is None else info.author,
            head_branch=None if info is None else recorded_branch(info.head_branch),
            base_branch=branch,
            readiness=readiness,
            is_submitted=True,
            force_enqueued=False,
            position=position,
            submitted_at=now,
            is_up_to_date=False,
        )


class _MergedBefore(Exception):
    """The PR's last episode merged: read its head before deciding whether it may enter."""

    def __init__(self, repository: Repository) -> None:
        super().__init__(str(repository.ref))
        self.repository = repository


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


def _submit_read(asked: SubmitAsk, read: tuple[OrgId, QueuedOptions] | None) -> SubmitRead:
    if read is None:
        return False
    _org_id, found = read
    if found.state is None:
        queue_id, queue = found.queue_id, found.queue
        if queue_id is None or queue is None or queue.state is QueueState.DRAINING:
            return False
        return FirstSubmit(asked.ask, queue_id, queue, asked.priority, asked.no_batch)
    return _unchanged(found, asked.priority, asked.no_batch)


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
