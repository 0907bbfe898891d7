"""Pull requests in a queue: submit, cancel, restart, read, list, impacted targets."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from keepgreen.app.errors import Conflict, InvalidInput, NotFound, Unavailable
from keepgreen.app.lookup import find_entry, find_queue, find_queued_entry, find_repository
from keepgreen.app.ports import (
    Clock,
    CodeHost,
    CodeHostError,
    EntryPage,
    IdFactory,
    UnitOfWork,
    UnitOfWorkFactory,
)
from keepgreen.core.admission import admitted_state, requires_impacted_targets
from keepgreen.core.enums import Mergeability, PrState, QueueState, StateReason
from keepgreen.core.ids import OrgId, PullRequestId
from keepgreen.core.model import (
    ImpactedTargets,
    PullRequestInfo,
    Queue,
    QueueEntry,
    Readiness,
    RepoRef,
    Repository,
    StateChange,
)
from keepgreen.core.names import normalize_sha
from keepgreen.core.priority import DEFAULT_PRIORITY, Priority

_RESTARTABLE = frozenset({PrState.TESTING, PrState.PENDING_FAILURE, PrState.TESTS_PASSED})


@dataclass(frozen=True, slots=True)
class QueueTarget:
    """Which queue a request is about."""

    org_id: OrgId
    repo: RepoRef
    branch: str


class PullRequestService:
    def __init__(
        self,
        uow: UnitOfWorkFactory,
        *,
        code_host: CodeHost,
        clock: Clock,
        new_id: IdFactory,
    ) -> None:
        self._uow = uow
        self._code_host = code_host
        self._clock = clock
        self._new_id = new_id

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
        """
        with self._uow() as uow:
            repository = find_repository(uow, target.org_id, target.repo)
            find_queue(uow, repository, target.branch)
        # Ask the code host outside any transaction: git may take a while.
        info = self._read_pull_request(repository, number)
        mergeability = self._mergeability(repository, info, target.branch)
        with self._uow() as uow:
            queue = find_queue(uow, repository, target.branch, lock=True)
            existing = uow.entries.find(queue.id, number)
            if existing is not None and not existing.state.is_terminal:
                entry = self._resubmit_live(uow, existing, priority=priority, no_batch=no_batch)
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
                entry = self._new_episode(
                    uow,
                    queue,
                    existing,
                    info,
                    mergeability=mergeability,
                    priority=priority or DEFAULT_PRIORITY,
                    no_batch=bool(no_batch),
                )
            uow.commit()
        return entry

    def cancel(self, target: QueueTarget, number: int) -> QueueEntry:
        """Take a PR out of its queue (404 when it is not in it)."""
        with self._uow() as uow:
            queue = self._queue(uow, target, lock=True)
            entry = find_queued_entry(uow, queue, number)
            entry = self._transition(
                uow, entry, PrState.CANCELLED, StateReason.CANCELED_BY_USER, is_submitted=False
            )
            uow.commit()
        return entry

    def restart(self, target: QueueTarget, number: int) -> QueueEntry:
        """Ask for a PR's tests to run again; only a PR being tested or decided can restart."""
        with self._uow() as uow:
            queue = self._queue(uow, target, lock=True)
            entry = find_queued_entry(uow, queue, number)
            if entry.state not in _RESTARTABLE:
                raise Conflict(
                    "not_restartable",
                    f"pull request #{number} is {entry.state.value}; only a PR that is testing, "
                    "tests_passed or pending_failure can restart its tests",
                )
            entry = self._transition(uow, entry, PrState.PENDING, StateReason.RESTART_REQUESTED)
            uow.commit()
        return entry

    def get(self, target: QueueTarget, number: int) -> QueueEntry:
        with self._uow() as uow:
            return find_entry(uow, self._queue(uow, target), number)

    def list(
        self,
        target: QueueTarget,
        *,
        state: PrState | None,
        concluded_since: datetime | None,
        cursor: PullRequestId | None,
        take: int,
    ) -> EntryPage:
        with self._uow() as uow:
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
            entry = uow.entries.find(queue.id, number)
            if entry is not None and not entry.state.is_terminal and entry.head_sha == head_sha:
                readiness = replace(entry.readiness, has_impacted_targets=True)
                entry = replace(entry, readiness=readiness)
                uow.entries.save(entry)
                if entry.state is PrState.NOT_READY:
                    self._admit_if_ready(uow, queue, entry)
            uow.commit()

    # -- helpers -------------------------------------------------------------------------------

    def _queue(self, uow: UnitOfWork, target: QueueTarget, *, lock: bool = False) -> Queue:
        return find_queue(
            uow, find_repository(uow, target.org_id, target.repo), target.branch, lock=lock
        )

    def _read_pull_request(self, repository: Repository, number: int) -> PullRequestInfo:
        try:
            info = self._code_host.pull_request(repository, number)
        except CodeHostError as error:
            raise Unavailable("code_host_unavailable", str(error)) from error
        if info is None:
            raise NotFound(
                "pull_request_not_found",
                f"pull request #{number} does not exist in {repository.ref} "
                f"(no ref refs/pull/{number}/head)",
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
            raise Unavailable("code_host_unavailable", str(error)) from error

    def _resubmit_live(
        self,
        uow: UnitOfWork,
        entry: QueueEntry,
        *,
        priority: Priority | None,
        no_batch: bool | None,
    ) -> QueueEntry:
        updated = replace(
            entry,
            priority=priority or entry.priority,
            no_batch=entry.no_batch if no_batch is None else no_batch,
        )
        if updated != entry:
            uow.entries.save(updated)
        return updated

    def _new_episode(
        self,
        uow: UnitOfWork,
        queue: Queue,
        previous: QueueEntry | None,
        info: PullRequestInfo,
        *,
        mergeability: Mergeability,
        priority: Priority,
        no_batch: bool,
    ) -> QueueEntry:
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
            base_branch=queue.branch,
            readiness=readiness,
            is_submitted=True,
            force_enqueued=False,
            position=uow.queues.next_position(queue.id),
            submitted_at=now,
        )
        if previous is None:
            uow.entries.add(entry)
        else:
            uow.entries.save(entry)
        uow.history.add(
            StateChange(
                entry.id,
                queue.id,
                None if previous is None else previous.state,
                PrState.NOT_READY,
                StateReason.SUBMITTED,
                now,
            )
        )
        return self._admit_if_ready(uow, queue, entry)

    def _admit_if_ready(self, uow: UnitOfWork, queue: Queue, entry: QueueEntry) -> QueueEntry:
        if admitted_state(entry.readiness, queue) is PrState.PENDING:
            return self._transition(uow, entry, PrState.PENDING, StateReason.READY)
        return entry

    def _transition(
        self,
        uow: UnitOfWork,
        entry: QueueEntry,
        state: PrState,
        reason: StateReason,
        *,
        is_submitted: bool | None = None,
    ) -> QueueEntry:
        now = self._clock()
        updated = replace(
            entry,
            state=state,
            state_reason=reason,
            state_changed_at=now,
            is_submitted=entry.is_submitted if is_submitted is None else is_submitted,
        )
        uow.entries.save(updated)
        uow.history.add(StateChange(entry.id, entry.queue_id, entry.state, state, reason, now))
        return updated
