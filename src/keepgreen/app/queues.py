"""Creating, configuring, reading and deleting merge queues."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from keepgreen.app.engine import QueueEngine, live_entries
from keepgreen.app.errors import Conflict, InvalidInput
from keepgreen.app.incidents import INCIDENTS_SHOWN_FOR, SHOWN_INCIDENTS
from keepgreen.app.lookup import find_queue, find_repository, for_tokens, queue_version
from keepgreen.app.ports import Clock, IdFactory, QuickReads, UnitOfWorkFactory
from keepgreen.app.stall import read_stall
from keepgreen.core.enums import (
    DirectMergeMode,
    FlakyFailures,
    MergeMethod,
    OptimizationMode,
    PrState,
    QueueMode,
    QueueState,
    TestBranchConstructionMode,
)
from keepgreen.core.ids import OrgId, QueueId
from keepgreen.core.model import (
    Queue,
    QueueAsk,
    QueueConfig,
    QueueSnapshot,
    QueueVersion,
    RepoRef,
)
from keepgreen.core.names import branch_name_problem
from keepgreen.core.ordering import queue_order
from keepgreen.core.scheduler import QueueConfigChanged

_ADMITTED_STATES = frozenset(state for state in PrState if state.is_admitted)


@dataclass(frozen=True, slots=True)
class QueueUpdate:
    """The changes of one `updateQueue` call; None leaves a setting as it is."""

    state: QueueState | None = None
    mode: QueueMode | None = None
    concurrency: int | None = None
    bisection_concurrency: int | None = None
    testing_timeout_minutes: int | None = None
    pending_failure_depth: int | None = None
    can_optimistically_merge: bool | None = None
    batch: bool | None = None
    batching_max_wait_time_minutes: int | None = None
    batching_min_size: int | None = None
    create_prs_for_testing_branches: bool | None = None
    comments_enabled: bool | None = None
    commands_enabled: bool | None = None
    status_check_enabled: bool | None = None
    direct_merge_mode: DirectMergeMode | None = None
    optimization_mode: OptimizationMode | None = None
    merge_method: MergeMethod | None = None
    required_statuses: tuple[str, ...] | None = None
    delete_required_statuses: bool = False
    check_start_timeout_minutes: int | None = None
    adaptive_testing_timeout: bool | None = None
    stall_minutes: int | None = None
    accept_skipped_checks: bool | None = None
    max_retries: int | None = None
    flaky_failures: FlakyFailures | None = None
    bisect_beside_queue: bool | None = None
    adaptive_batch_size: bool | None = None
    adaptive_depth: bool | None = None
    not_ready_timeout_hours: int | None = None
    enqueueing_label: str | None = None
    label_commands_enabled: bool | None = None
    allowed_bot_submitters: tuple[str, ...] | None = None
    state_labels_enabled: bool | None = None
    extension_enabled: bool | None = None
    test_branch_construction_mode: TestBranchConstructionMode | None = None
    batching_rules: tuple[str, ...] | None = None


_CONFIG_FIELDS = (
    "concurrency",
    "bisection_concurrency",
    "testing_timeout_minutes",
    "pending_failure_depth",
    "can_optimistically_merge",
    "batch",
    "batching_max_wait_time_minutes",
    "batching_min_size",
    "create_prs_for_testing_branches",
    "comments_enabled",
    "commands_enabled",
    "status_check_enabled",
    "direct_merge_mode",
    "optimization_mode",
    "merge_method",
    "check_start_timeout_minutes",
    "adaptive_testing_timeout",
    "stall_minutes",
    "accept_skipped_checks",
    "max_retries",
    "flaky_failures",
    "bisect_beside_queue",
    "adaptive_batch_size",
    "adaptive_depth",
    "not_ready_timeout_hours",
    "enqueueing_label",
    "label_commands_enabled",
    "allowed_bot_submitters",
    "state_labels_enabled",
    "extension_enabled",
    "test_branch_construction_mode",
    "batching_rules",
)


def apply_update(queue: Queue, update: QueueUpdate, *, has_admitted_entries: bool) -> Queue:
    """The queue after `update`. A mode change with PRs in the queue enters `switching_modes`
    (the engine finishes the switch once they are done); an empty queue switches at once.
    """
    if queue.state is QueueState.SWITCHING_MODES:
        raise Conflict(
            "mode_change_in_progress",
            "the queue is switching modes; it accepts configuration again once the switch is done",
        )
    if update.state is QueueState.SWITCHING_MODES:
        raise InvalidInput("invalid_field", "state: switching_modes is set by keepgreen only")
    changes = {
        name: getattr(update, name) for name in _CONFIG_FIELDS if getattr(update, name) is not None
    }
    config = replace(queue.config, **changes)
    if update.delete_required_statuses:
        config = replace(config, required_statuses=None)
    if update.enqueueing_label == "":  # back to the instance's label
        config = replace(config, enqueueing_label=None)
    # An empty list requires none of the queue's own: like `deleteRequiredStatuses`, the queue
    # falls back to the branch's protection (or `keepgreen/ci`), and answers `[]` as it was
    # sent (a client that sets `[]` reads `[]` back, as Terraform checks).
    if update.required_statuses is not None:
        config = replace(config, required_statuses=update.required_statuses or None)
    state: QueueState = update.state or queue.state
    mode, pending_mode = queue.mode, None
    if update.mode is not None and update.mode is not queue.mode:
        if has_admitted_entries and state is QueueState.PAUSED:
            # Switching finishes the PRs in the queue, which a paused queue must not do.
            raise Conflict(
                "queue_paused",
                "a paused queue with PRs in it cannot switch modes; resume it, or cancel "
                "its PRs, first",
            )
        if has_admitted_entries:
            state, pending_mode = QueueState.SWITCHING_MODES, update.mode
        else:
            mode = update.mode
    return replace(queue, config=config, state=state, mode=mode, pending_mode=pending_mode)


def _queue_exists(branch: str) -> Conflict:
    return Conflict(
        "queue_exists", f'A merge queue already exists for branch "{branch}" in this repository'
    )


class QueueService:
    def __init__(
        self,
        uow: UnitOfWorkFactory,
        *,
        engine: QueueEngine,
        wake: Callable[[], None],
        clock: Clock,
        new_id: IdFactory,
        quick: QuickReads,
    ) -> None:
        self._uow = uow
        self._quick = quick
        self._engine = engine
        self._wake = wake
        self._clock = clock
        self._new_id = new_id

    def create(
        self,
        org_id: OrgId,
        ref: RepoRef,
        branch: str,
        *,
        mode: QueueMode | None = None,
        concurrency: int | None = None,
        feedback_on_pull_requests: bool = False,
    ) -> Queue:
        """Create a queue for `branch`; `feedback_on_pull_requests` turns its check runs and
        comments on (`statusCheckEnabled`, `commentsEnabled`), as for queues the GitHub App
        makes.
        """
        problem = branch_name_problem(branch)
        if problem is not None:
            raise InvalidInput("invalid_field", f"targetBranch {problem}")
        try:
            with self._uow() as uow:
                repository = find_repository(uow, org_id, ref)
                if uow.queues.find(repository.id, branch) is not None:
                    raise _queue_exists(branch)
                now = self._clock()
                defaults = QueueConfig()
                queue = Queue(
                    id=QueueId(self._new_id()),
                    repository_id=repository.id,
                    branch=branch,
                    state=QueueState.RUNNING,
                    mode=mode or QueueMode.SINGLE,
                    config=replace(
                        defaults,
                        concurrency=concurrency or defaults.concurrency,
                        status_check_enabled=feedback_on_pull_requests,
                        comments_enabled=feedback_on_pull_requests,
                    ),
                    created_at=now,
                    updated_at=now,
                )
                uow.queues.add(queue)
                uow.commit()
        except Conflict as clash:
            if clash.code == "concurrent_write":  # a concurrent create won the race
                raise _queue_exists(branch) from clash
            raise
        return queue

    def update(self, org_id: OrgId, ref: RepoRef, branch: str, update: QueueUpdate) -> Queue:
        with self._uow() as uow:
            queue = find_queue(uow, find_repository(uow, org_id, ref), branch, lock=True)
            admitted = uow.entries.list_for_queues([queue.id], states=_ADMITTED_STATES)
            updated = apply_update(queue, update, has_admitted_entries=bool(admitted))
            if updated != queue:
                updated = replace(updated, updated_at=self._clock())
                uow.queues.save(updated)
                # The scheduler reacts at once: a resumed queue admits, a switch may finish.
                decision = self._engine.advance(uow, updated, QueueConfigChanged(updated))
                updated = decision.state.queue
                uow.commit()
        self._wake()
        return updated

    def version(self, org_id: OrgId, ref: RepoRef, branch: str) -> QueueVersion:
        """The queue's id and version (one short read), or the 404 `get` would raise."""
        return queue_version(self._quick, org_id, ref, branch)

    async def versions_for_tokens(
        self, asked: Sequence[tuple[str, QueueAsk]]
    ) -> list[tuple[OrgId, QueueVersion] | None]:
        """`version` of each asked queue for the org of the presented token it comes with, the
        tokens checked in the same read, all in one: None for one whose token is not live or
        whose org has no such queue (what `version` and the token check would refuse, left to
        them).
        """
        return await for_tokens(self._quick.token_queue_versions, asked)

    def get(self, org_id: OrgId, ref: RepoRef, branch: str) -> QueueSnapshot:
        """The queue, its admitted entries in queue order (not_ready PRs are not listed), its
        incidents open or ended within `INCIDENTS_SHOWN_FOR`, newest first, and its stall.
        """
        now = self._clock()
        with self._uow(read_only=True) as uow:
            repository = find_repository(uow, org_id, ref)
            queue = find_queue(uow, repository, branch)
            live = live_entries(uow, queue.id)
            incidents = uow.incidents.recent(
                queue.id, limit=SHOWN_INCIDENTS, since=now - INCIDENTS_SHOWN_FOR
            )
            stall = read_stall(uow, queue, repository, live, now=now)
        admitted = [entry for entry in live if entry.state.is_admitted]
        return QueueSnapshot(
            queue,
            queue_order(admitted),
            tuple(incidents),
            stalled_since=stall.since,
            waiting_on=stall.waiting_on,
        )

    def delete(self, org_id: OrgId, ref: RepoRef, branch: str) -> None:
        """Delete an empty queue: every submitted PR must have merged, failed or been cancelled
        (400 `queue_not_empty` otherwise).
        """
        with self._uow() as uow:
            queue = find_queue(uow, find_repository(uow, org_id, ref), branch, lock=True)
            live = live_entries(uow, queue.id)
            if live:
                numbers = ", ".join(f"#{entry.number}" for entry in live[:10])
                # 400, as the hosted service answers it (its Terraform provider reads 400).
                raise InvalidInput(
                    "queue_not_empty",
                    f"the queue still holds {len(live)} pull request(s) ({numbers}); "
                    "cancel them or set the queue to draining and wait",
                )
            uow.queues.delete(queue.id)
            uow.commit()
