"""`decide`: one event in, the queue's next state and the effects to carry out.

The scheduler is a reconciler. It applies the event, then recomputes the plan from the state
until nothing changes: admit ready PRs, time out runs, read CI statuses, drop runs whose
predicted branch no longer matches the queue, pass or fail entries, clear entries a passing
successor included (optimistic merge), resolve pending failures (fail, or bisect a batch), land
the front of each lane, and start new runs up to the concurrency. Pure: no I/O, no clock (the
time is `now`), no randomness (run ids are UUIDv5 of the queue id and a counter).
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import datetime, timedelta
from typing import assert_never

from keepgreen.core.enums import (
    CommitState,
    DirectMergeMode,
    OptimizationMode,
    PrState,
    QueueMode,
    QueueState,
    StateReason,
    TestRunKind,
    TestRunStatus,
)
from keepgreen.core.ids import PullRequestId, TestRunId
from keepgreen.core.model import ChainLink, QueueEntry, StateChange, TestRun
from keepgreen.core.ordering import queue_order
from keepgreen.core.scheduler.effects import (
    BuildTestCommit,
    CancelCi,
    DeleteTestBranch,
    Effect,
    Land,
    StartCi,
)
from keepgreen.core.scheduler.events import (
    CiLost,
    EntrySubmitted,
    Event,
    ImpactedTargetsSet,
    Landed,
    LandRefused,
    PrClosed,
    PrHeadMoved,
    QueueConfigChanged,
    ReadinessChanged,
    RestartRequested,
    StatusReported,
    TargetBranchMoved,
    TestCommitBuilt,
    TestCommitConflict,
    Tick,
    UserCancelled,
)
from keepgreen.core.scheduler.lanes import dependencies
from keepgreen.core.scheduler.state import (
    BUILT_IN_CI_CONTEXT,
    Decision,
    EngineState,
    Policy,
)

_RUN_ID_NAMESPACE = uuid.UUID("5b0f4c52-8a53-4c1e-9d3e-6f2f1b1c7a10")
_FAILING = frozenset({CommitState.FAILURE, CommitState.ERROR})
_DECIDED = frozenset({TestRunStatus.SUCCEEDED, TestRunStatus.FAILED})
_RUNNING = frozenset({TestRunStatus.QUEUED, TestRunStatus.IN_PROGRESS})
# Reconciliation reaches a fixed point in a few rounds; the bound only guards against a bug
# turning into an endless loop.
_MAX_ROUNDS = 1000


def decide(state: EngineState, event: Event, *, now: datetime, policy: Policy) -> Decision:
    """Apply `event` to `state`, reconcile, and return the new state with its effects.

    Invariants kept: an entry is tested by at most one open run; a run's predicted branch is
    the target tip plus exactly the live entries its tested PRs depend on; entries land in queue
    order within a lane, and only from a passed run whose chain holds them; a paused queue starts
    and lands nothing.
    """
    world = _World(state, now=now, policy=policy)
    world.apply(event)
    world.reconcile()
    return world.decision()


def test_branch_name(number: int, run_id: TestRunId, *, prefix: str) -> str:
    """`<prefix>/pr-<N>/<testRunId>`; a batch is named after its first PR."""
    return f"{prefix}/pr-{number}/{run_id}"


class _World:
    """A working copy of one queue's state, changed in place while deciding."""

    def __init__(self, state: EngineState, *, now: datetime, policy: Policy) -> None:
        self.queue = state.queue
        self.now = now
        self.policy = policy
        self.entries: dict[PullRequestId, QueueEntry] = {e.id: e for e in state.entries}
        self.runs: dict[TestRunId, TestRun] = {r.id: r for r in state.runs}
        self.failed_runs = list(state.failed_runs)
        self.targets = dict(state.targets)
        self.statuses = state.statuses
        self.in_flight: list[Effect] = list(state.in_flight)
        self.effects: list[Effect] = []
        self.changes: list[StateChange] = []
        self.departed: dict[PullRequestId, QueueEntry] = {}
        self.closed: dict[TestRunId, TestRun] = {}
        self.changed = False

    # -- output ----------------------------------------------------------------------------

    def decision(self) -> Decision:
        open_roots = {r.bisection_root for r in self.runs.values() if r.bisection_root}
        open_roots |= set(self.runs)
        state = EngineState(
            queue=self.queue,
            entries=tuple(self.entries.values()),
            runs=tuple(self.runs.values()),
            failed_runs=tuple(r for r in self.failed_runs if r.bisection_root in open_roots),
            targets={k: v for k, v in self.targets.items() if k in self.entries},
            statuses=self.statuses,
            in_flight=tuple(self.in_flight),
        )
        return Decision(
            state=state,
            effects=tuple(self.effects),
            changes=tuple(self.changes),
            departed=tuple(self.departed.values()),
            closed_runs=tuple(self.closed.values()),
        )

    def emit(self, effect: Effect) -> None:
        self.effects.append(effect)
        self.in_flight.append(effect)
        self.changed = True

    # -- entry and run changes -------------------------------------------------------------

    def move(
        self,
        entry: QueueEntry,
        state: PrState,
        reason: StateReason,
        *,
        run_id: TestRunId | None = None,
        verified_by: TestRunId | None = None,
    ) -> QueueEntry:
        """Change an entry's state and record the change in its history."""
        updated = replace(
            entry,
            state=state,
            state_reason=reason,
            state_changed_at=self.now,
            verified_by_test_run=verified_by,
            is_submitted=entry.is_submitted and not state.is_terminal,
        )
        self.changes.append(
            StateChange(entry.id, entry.queue_id, entry.state, state, reason, self.now, run_id)
        )
        if state.is_terminal:
            del self.entries[entry.id]
            self.departed[entry.id] = updated
        else:
            self.entries[entry.id] = updated
        self.changed = True
        return updated

    def put_run(self, run: TestRun) -> None:
        self.runs[run.id] = run
        self.changed = True

    def close_run(self, run: TestRun, status: TestRunStatus | None = None) -> None:
        """Close a run: it stops counting, its CI stops and its branch is deleted."""
        if status is not None and run.status in _RUNNING:
            run = replace(run, status=status, finished_at=self.now)
        if run.status in _RUNNING:
            run = replace(run, status=TestRunStatus.CANCELLED, finished_at=self.now)
        run = replace(run, closed_at=self.now)
        del self.runs[run.id]
        self.closed[run.id] = run
        if run.status is TestRunStatus.CANCELLED and self.policy.has_built_in_ci:
            self.emit(CancelCi(run.id))
        if run.sha is not None or self.has_in_flight_build(run.id):
            self.emit(DeleteTestBranch(run.id, run.branch))
        if run.status is TestRunStatus.FAILED and run.bisection_root is not None:
            self.failed_runs.append(run)
        self.changed = True

    def has_in_flight_build(self, run_id: TestRunId) -> bool:
        return any(isinstance(e, BuildTestCommit) and e.run_id == run_id for e in self.in_flight)

    def landing_in_flight(self) -> Land | None:
        return next((e for e in self.in_flight if isinstance(e, Land)), None)

    def current_run(self, entry_id: PullRequestId) -> TestRun | None:
        """The open run testing this entry (at most one)."""
        return next((r for r in self.runs.values() if entry_id in r.tested_prs), None)

    def entry_by_number(self, number: int) -> QueueEntry | None:
        return next((e for e in self.entries.values() if e.number == number), None)

    def required_statuses(self) -> tuple[str, ...]:
        return self.policy.required_statuses(self.queue)

    # -- events ----------------------------------------------------------------------------

    def apply(self, event: Event) -> None:  # noqa: PLR0912 - one arm per event kind
        match event:
            case Tick() | StatusReported():
                pass
            case EntrySubmitted(entry=entry, new_episode=new_episode, previous_state=previous):
                self.submit(entry, new_episode=new_episode, previous=previous)
            case UserCancelled(number=number, reason=reason):
                self.cancel(number, reason)
            case PrHeadMoved(number=number, head_sha=head_sha):
                found = self.entry_by_number(number)
                if found is not None and found.head_sha != head_sha:
                    self.cancel(number, StateReason.PUSHED_TO)
            case PrClosed(number=number):
                self.cancel(number, StateReason.PR_CLOSED)
            case RestartRequested(number=number):
                self.restart(number)
            case ImpactedTargetsSet(number=number, head_sha=head_sha, targets=targets):
                found = self.entry_by_number(number)
                if found is not None and found.head_sha == head_sha:
                    self.targets[found.id] = targets
                    readiness = replace(found.readiness, has_impacted_targets=True)
                    self.entries[found.id] = replace(found, readiness=readiness)
                    self.changed = True
            case ReadinessChanged(number=number, readiness=readiness, is_up_to_date=up_to_date):
                found = self.entry_by_number(number)
                if found is not None:
                    self.entries[found.id] = replace(
                        found, readiness=readiness, is_up_to_date=up_to_date
                    )
            case TargetBranchMoved(sha=sha):
                self.target_moved(sha)
            case QueueConfigChanged(queue=queue):
                self.queue = replace(
                    queue, target_sha=self.queue.target_sha, run_seq=self.queue.run_seq
                )
            case TestCommitBuilt(run_id=run_id, base_tree=base_tree, links=links):
                self.built(run_id, base_tree, links)
            case TestCommitConflict(run_id=run_id, number=number):
                self.forget_effect(BuildTestCommit, run_id)
                run = self.runs.get(run_id)
                if run is not None and run.status is TestRunStatus.IN_PROGRESS:
                    culprit = self.entry_by_number(number)
                    ahead = culprit is not None and culprit.id not in run.tested_prs
                    # A PR ahead that does not merge is not the tested PRs' fault.
                    reason = (
                        StateReason.PREDECESSOR_CHANGED if ahead else StateReason.MERGE_CONFLICT
                    )
                    self.put_run(
                        replace(
                            run,
                            status=TestRunStatus.FAILED,
                            failure_reason=reason,
                            finished_at=self.now,
                        )
                    )
                    self.conflict_ahead(run, number)
            case Landed(number=number, new_tip=new_tip):
                self.landed(number, new_tip)
            case LandRefused(number=number, problem=problem, tip=tip):
                self.land_refused(number, problem, tip)
            case CiLost(run_id=run_id):
                self.ci_lost(run_id)
            case _:
                assert_never(event)

    def conflict_ahead(self, run: TestRun, number: int) -> None:
        """A PR ahead of the tested ones (`number`, a dependent of `run`) did not merge onto the
        run's base. When its own verdict came from a run on another base (in parallel mode,
        another lane landed since), that verdict no longer stands: it is tested again on this
        base (and fails there if it really conflicts). Meanwhile the run's tested PRs wait for
        the PRs ahead to leave (`resolve_failures`), then are tested again.
        """
        culprit = self.entry_by_number(number)
        if culprit is None or culprit.id in run.tested_prs:
            return
        for other in list(self.runs.values()):
            vouches = culprit.id in other.tested_prs or culprit.verified_by_test_run == other.id
            if other.id != run.id and vouches and other.base_sha != run.base_sha:
                self.invalidate(other, StateReason.TARGET_BRANCH_MOVED)

    def forget_effect(self, kind: type[BuildTestCommit] | type[Land], key: object) -> None:
        """Drop an answered effect from the outbox view (the interpreter deletes its row)."""
        self.in_flight = [
            e
            for e in self.in_flight
            if not (
                isinstance(e, kind)
                and (e.run_id if isinstance(e, BuildTestCommit) else e.number) == key
            )
        ]

    def submit(self, entry: QueueEntry, *, new_episode: bool, previous: PrState | None) -> None:
        live = self.entries.get(entry.id)
        if not new_episode:
            if live is not None:
                # Submitting a live entry again only updates its options.
                self.entries[entry.id] = replace(
                    live, priority=entry.priority, no_batch=entry.no_batch
                )
                self.changed = True
            return
        self.entries[entry.id] = replace(
            entry,
            state=PrState.NOT_READY,
            state_reason=StateReason.SUBMITTED,
            state_changed_at=self.now,
            verified_by_test_run=None,
        )
        self.changes.append(
            StateChange(
                entry.id,
                entry.queue_id,
                previous,
                PrState.NOT_READY,
                StateReason.SUBMITTED,
                self.now,
            )
        )
        self.changed = True

    def cancel(self, number: int, reason: StateReason) -> None:
        entry = self.entry_by_number(number)
        if entry is None:
            return
        if any(isinstance(e, Land) and e.number == number for e in self.in_flight):
            # Its landing is under way; the result decides (a landed PR stays merged).
            return
        self.move(entry, PrState.CANCELLED, reason)

    def restart(self, number: int) -> None:
        entry = self.entry_by_number(number)
        if entry is None or not entry.state.is_started:
            return
        run = self.current_run(entry.id)
        if run is not None:
            self.invalidate(run, StateReason.RESTART_REQUESTED)
        entry = self.entries[entry.id]
        if entry.state is not PrState.PENDING or entry.verified_by_test_run is not None:
            self.move(entry, PrState.PENDING, StateReason.RESTART_REQUESTED)

    def ci_lost(self, run_id: TestRunId) -> None:
        """Start a run's built-in CI again: its worker died before the command reported.

        Ignored unless the run is still waiting for the built-in status (none final reported,
        no start or cancel of it under way): a late or repeated report of a loss changes
        nothing. The run keeps its id, test commit and members; its timeout counts afresh.
        """
        run = self.runs.get(run_id)
        if (
            run is None
            or run.status is not TestRunStatus.IN_PROGRESS
            or run.sha is None
            or not self.policy.has_built_in_ci
            or BUILT_IN_CI_CONTEXT not in run.required_statuses
        ):
            return
        reported = self.statuses.get(run.sha, {}).get(BUILT_IN_CI_CONTEXT)
        if reported is not None and reported is not CommitState.PENDING:
            return
        if any(isinstance(e, StartCi | CancelCi) and e.run_id == run_id for e in self.in_flight):
            return
        self.put_run(replace(run, started_at=self.now))
        self.emit(StartCi(run_id, run.sha, self.queue.config.testing_timeout_minutes * 60))
        for entry_id in run.tested_prs:
            entry = self.entries.get(entry_id)
            if entry is not None:
                self.move(
                    entry,
                    entry.state,
                    StateReason.CI_LOST,
                    run_id=run_id,
                    verified_by=entry.verified_by_test_run,
                )

    def target_moved(self, sha: str) -> None:
        if self.queue.target_sha == sha:
            return
        if self.queue.target_sha is None:
            # First sight: what the code host said about PR heads was said against this tip.
            self.queue = replace(self.queue, target_sha=sha)
            self.changed = True
            return
        if self.landing_in_flight() is not None:
            # The queue's own landing may be what moved it (a crash before its result was
            # recorded); the landing's answer settles it, with the tip when it was not ours.
            return
        self.set_tip(sha)
        # Someone else moved the branch: nothing tested so far contains their commits.
        for run in list(self.runs.values()):
            self.invalidate(run, StateReason.TARGET_BRANCH_MOVED)

    def built(self, run_id: TestRunId, base_tree: str, links: tuple[ChainLink, ...]) -> None:
        self.forget_effect(BuildTestCommit, run_id)
        run = self.runs.get(run_id)
        if run is None or run.sha is not None or run.status is not TestRunStatus.IN_PROGRESS:
            return
        sha = links[-1].commit if links else run.base_sha
        self.put_run(replace(run, sha=sha, base_tree=base_tree, chain=links))
        if self.policy.has_built_in_ci and BUILT_IN_CI_CONTEXT in run.required_statuses:
            timeout = self.queue.config.testing_timeout_minutes * 60
            self.emit(StartCi(run_id, sha, timeout))

    def set_tip(self, sha: str) -> None:
        """The target branch is at `sha` now: no PR head contains it (until the code host says
        otherwise with `ReadinessChanged`), so no entry is up to date any more.
        """
        self.queue = replace(self.queue, target_sha=sha)
        for entry in list(self.entries.values()):
            if entry.is_up_to_date:
                self.entries[entry.id] = replace(entry, is_up_to_date=False)
        self.changed = True

    def landed(self, number: int, new_tip: str) -> None:
        # The landing itself tells how the PR was verified (the entry may have been sent back
        # to `pending` meanwhile, when a PR behind it in its batch left).
        land = next((e for e in self.in_flight if isinstance(e, Land) and e.number == number), None)
        self.forget_effect(Land, number)
        self.set_tip(new_tip)
        entry = self.entry_by_number(number)
        if entry is None:
            return
        verified_by = land.run_id if land is not None else entry.verified_by_test_run
        direct = verified_by is None
        reason = StateReason.MERGED_DIRECTLY if direct else StateReason.MERGED_BY_QUEUE
        self.move(entry, PrState.MERGED, reason, run_id=verified_by, verified_by=verified_by)

    def land_refused(self, number: int, problem: str, tip: str | None) -> None:
        self.forget_effect(Land, number)
        if tip is not None:
            self.target_moved(tip)
        entry = self.entry_by_number(number)
        if entry is None or problem == "target_moved":
            return
        if problem == "conflict":
            self.move(entry, PrState.FAILED, StateReason.MERGE_REFUSED)
            return
        if problem == "push_rejected":
            # The server's own rule refused the tested change; trying again would be refused
            # again, so the PR leaves (the worker recorded what the server said).
            self.move(entry, PrState.FAILED, StateReason.PUSH_REJECTED)
            return
        # The branch does not hold the tree the run was built on: test again.
        run = self.runs.get(entry.verified_by_test_run or TestRunId(""))
        if run is not None:
            self.invalidate(run, StateReason.TARGET_BRANCH_MOVED)
        entry = self.entries[entry.id]
        if entry.state is not PrState.PENDING or entry.verified_by_test_run is not None:
            self.move(entry, PrState.PENDING, StateReason.TARGET_BRANCH_MOVED)

    # -- reconciliation --------------------------------------------------------------------

    def reconcile(self) -> None:
        for _ in range(_MAX_ROUNDS):
            self.changed = False
            self.admit()
            self.time_out_runs()
            self.read_statuses()
            self.drop_stale_runs()
            self.follow_runs()
            self.clear_by_successors()
            self.resolve_failures()
            self.land_next()
            self.start_queued_bisections()
            self.start_runs()
            self.close_unused_runs()
            self.finish_mode_switch()
            if not self.changed:
                return
        msg = "the scheduler did not settle"  # pragma: no cover - a bug guard
        raise RuntimeError(msg)  # pragma: no cover

    def order(self) -> tuple[QueueEntry, ...]:
        """`queue_order`, with the entries already placed on a test branch in the order of the
        branches they are on.

        Every live member of an open run is placed, dependents included: a PR whose own run was
        abandoned (restarted, or landing) stays in front of the runs built on top of it, which
        go on. Placed entries go by their depth in the runs that hold them, not by admission: a
        PR that went ahead by priority, or that became ready late, was placed on top of the PRs
        already placed and must stay there once placed itself, or the runs built on it would
        look stale forever.
        """
        depth: dict[PullRequestId, int] = {}
        for run in self.runs.values():
            chain = [member for member in run.members if member in self.entries]
            for index, member in enumerate(chain):
                depth[member] = min(depth.get(member, index), index)
        holding = set(depth)
        placed = sorted(
            (e for e in self.entries.values() if e.state.is_started or e.id in holding),
            key=lambda e: (depth.get(e.id, len(self.entries)), e.position, e.id),
        )
        # queue_order sorts placed entries by position: hand it their rank instead.
        ranked = {e.id: replace(e, position=rank) for rank, e in enumerate(placed)}
        ordered = queue_order(
            (ranked.get(e.id, e) for e in self.entries.values()), holding=frozenset(holding)
        )
        return tuple(self.entries[e.id] for e in ordered)

    def deps(self, order: tuple[QueueEntry, ...]) -> dict[PullRequestId, tuple[PullRequestId, ...]]:
        return dependencies(order, mode=self.queue.mode, targets=self.targets)

    def admit(self) -> None:
        """`not_ready` -> `pending` when ready and the queue is running."""
        if self.queue.state is not QueueState.RUNNING:
            return
        needs_targets = self.queue.mode is QueueMode.PARALLEL
        for entry in list(self.entries.values()):
            if entry.state is not PrState.NOT_READY:
                continue
            readiness = replace(
                entry.readiness,
                requires_impacted_targets=needs_targets,
                has_impacted_targets=entry.id in self.targets,
            )
            updated = replace(entry, readiness=readiness)
            self.entries[entry.id] = updated
            if readiness.is_ready:
                self.move(updated, PrState.PENDING, StateReason.READY)

    def time_out_runs(self) -> None:
        limit = timedelta(minutes=self.queue.config.testing_timeout_minutes)
        for run in list(self.runs.values()):
            started = run.started_at or run.created_at
            if run.status is TestRunStatus.IN_PROGRESS and self.now >= started + limit:
                self.put_run(
                    replace(
                        run,
                        status=TestRunStatus.FAILED,
                        failure_reason=StateReason.TEST_RUN_TIMEOUT,
                        finished_at=self.now,
                    )
                )
                if self.policy.has_built_in_ci:
                    self.emit(CancelCi(run.id))

    def read_statuses(self) -> None:
        """A run passes when every required status is success on its head; any failure fails it."""
        for run in list(self.runs.values()):
            if run.status is not TestRunStatus.IN_PROGRESS or run.sha is None:
                continue
            reported = self.statuses.get(run.sha, {})
            required = [reported.get(context) for context in run.required_statuses]
            if any(state in _FAILING for state in required):
                status, reason = TestRunStatus.FAILED, StateReason.TESTS_FAILED
            elif required and all(state is CommitState.SUCCESS for state in required):
                status, reason = TestRunStatus.SUCCEEDED, None
            else:
                continue
            self.put_run(replace(run, status=status, failure_reason=reason, finished_at=self.now))

    def drop_stale_runs(self) -> None:
        """A run whose predicted branch no longer matches the queue is abandoned; its entries
        go back to `pending` to be tested on the right branch. Repeats until none is stale:
        the later steps of the round must not act on a stale run's result.
        """
        while True:
            deps = self.deps(self.order())
            stale = next(
                (
                    (run, reason)
                    for run in self.runs.values()
                    if (reason := self.stale_reason(run, deps)) is not None
                ),
                None,
            )
            if stale is None:
                return
            self.invalidate(*stale)

    def stale_reason(
        self, run: TestRun, deps: dict[PullRequestId, tuple[PullRequestId, ...]]
    ) -> StateReason | None:
        for member in run.members:
            gone = self.departed.get(member)
            if gone is not None and gone.state is not PrState.MERGED:
                return StateReason.PREDECESSOR_CHANGED
        tested = [self.entries[t] for t in run.tested_prs if t in self.entries]
        admitted = [e for e in tested if e.state.is_admitted]
        if not admitted:
            return None
        expected: set[PullRequestId] = set()
        for entry in admitted:
            expected |= set(deps.get(entry.id, ()))
        expected -= set(run.tested_prs)
        live_dependents = {d for d in run.dependent_prs if d in self.entries}
        if expected == live_dependents:
            return None
        newcomers = [self.entries[e] for e in expected - live_dependents]
        if any(e.priority.skips_the_line for e in newcomers):
            return StateReason.PREEMPTED
        return StateReason.PREDECESSOR_CHANGED

    def invalidate(self, run: TestRun, reason: StateReason) -> None:
        """Abandon a run: close it and send the entries it held back to `pending`."""
        if run.id not in self.runs:
            return
        self.close_run(run, TestRunStatus.CANCELLED)
        for entry in list(self.entries.values()):
            holds = entry.id in run.tested_prs or entry.verified_by_test_run == run.id
            if not holds or not entry.state.is_admitted:
                continue
            if entry.state is PrState.PENDING and entry.verified_by_test_run is None:
                continue
            own = self.current_run(entry.id)
            if own is not None and own.id != run.id:
                # Cleared by this run but still tested by its own: fall back to that.
                self.entries[entry.id] = replace(entry, verified_by_test_run=None)
                self.follow_run(self.entries[entry.id], own)
                continue
            self.move(entry, PrState.PENDING, reason, run_id=run.id)

    def follow_runs(self) -> None:
        """Entries show the state of the run testing them."""
        for run in list(self.runs.values()):
            for entry_id in run.tested_prs:
                entry = self.entries.get(entry_id)
                if entry is not None and entry.state.is_admitted:
                    self.follow_run(entry, run)

    def follow_run(self, entry: QueueEntry, run: TestRun) -> None:
        if entry.verified_by_test_run is not None and entry.verified_by_test_run != run.id:
            return  # cleared by a successor; its own run no longer decides
        match run.status:
            case TestRunStatus.QUEUED:
                target, reason, verified = PrState.PENDING, StateReason.BISECTING, None
            case TestRunStatus.IN_PROGRESS:
                target, reason, verified = PrState.TESTING, StateReason.TESTS_STARTED, None
            case TestRunStatus.SUCCEEDED:
                target, reason, verified = PrState.TESTS_PASSED, StateReason.TESTS_PASSED, run.id
            case TestRunStatus.FAILED:
                target = PrState.PENDING_FAILURE
                reason = run.failure_reason or StateReason.TESTS_FAILED
                verified = None
            case TestRunStatus.CANCELLED:
                return
            case _:
                assert_never(run.status)
        if entry.state is not target:
            self.move(entry, target, reason, run_id=run.id, verified_by=verified)

    def clear_by_successors(self) -> None:
        """Optimistic merge: a passed run vouches for every PR in its predicted branch."""
        if not self.queue.config.can_optimistically_merge:
            return
        for run in list(self.runs.values()):
            if run.status is not TestRunStatus.SUCCEEDED:
                continue
            for entry_id in run.dependent_prs:
                entry = self.entries.get(entry_id)
                if entry is None or entry.state is PrState.TESTS_PASSED:
                    continue
                if not entry.state.is_admitted:
                    continue
                # Its own run, if any, closes once nothing follows it (close_unused_runs).
                self.move(
                    entry,
                    PrState.TESTS_PASSED,
                    StateReason.CLEARED_BY_SUCCESSOR,
                    run_id=run.id,
                    verified_by=run.id,
                )

    def resolve_failures(self) -> None:
        """A failed group waits for its predecessors to pass and for `pendingFailureDepth`
        successors; then a single PR fails and a batch is bisected.
        """
        order = self.order()
        deps = self.deps(order)
        for run in list(self.runs.values()):
            if run.status is not TestRunStatus.FAILED or run.id not in self.runs:
                continue
            group = [
                self.entries[t]
                for t in run.tested_prs
                if t in self.entries
                and self.entries[t].state is PrState.PENDING_FAILURE
                and self.entries[t].verified_by_test_run is None
            ]
            if not group:
                continue
            if run.failure_reason is StateReason.PREDECESSOR_CHANGED:
                # Its branch could not be built because of a PR ahead (`conflict_ahead`): no
                # blame. Once the PRs ahead have left (merged: a failure makes the run stale),
                # the group is tested again on the tip that holds them.
                if not any(d in self.entries for d in run.dependent_prs):
                    self.invalidate(run, StateReason.PREDECESSOR_CHANGED)
                continue
            ahead = {d for entry in group for d in deps.get(entry.id, ())} - set(run.tested_prs)
            if any(
                d not in self.entries or self.entries[d].state is not PrState.TESTS_PASSED
                for d in ahead
            ):
                # A predecessor may be the culprit: wait for it. One that just failed (earlier
                # in this loop) makes this run stale; the next round re-tests without it.
                continue
            if run.failure_reason is not StateReason.MERGE_CONFLICT and self.awaits_successors(
                run, order, deps
            ):
                continue
            if len(group) == 1:
                reason = run.failure_reason or StateReason.TESTS_FAILED
                self.move(group[0], PrState.FAILED, reason, run_id=run.id)
                self.close_run(run)
            else:
                self.bisect(run, group)

    def successors(self, run: TestRun) -> list[TestRun]:
        """Open runs behind this one that include its tested PRs in their predicted branch."""
        tested = set(run.tested_prs)
        return [r for r in self.runs.values() if r.id != run.id and tested & set(r.dependent_prs)]

    def awaits_successors(
        self,
        run: TestRun,
        order: tuple[QueueEntry, ...],
        deps: dict[PullRequestId, tuple[PullRequestId, ...]],
    ) -> bool:
        depth = self.queue.config.pending_failure_depth
        if depth <= 0:
            return False
        window = self.successors(run)[:depth]
        if any(r.status in _RUNNING for r in window):
            return True
        if len(window) >= depth:
            return False
        # Fewer successors than the depth: wait while one can still start behind it.
        if self.queue.state is QueueState.PAUSED:
            return True
        tested = set(run.tested_prs)
        return any(
            e.state is PrState.PENDING
            and self.current_run(e.id) is None
            and tested & set(deps.get(e.id, ()))
            for e in order
        )

    def bisect(self, run: TestRun, group: list[QueueEntry]) -> None:
        """Split a failed batch in halves, the second tested on top of the first."""
        root = run.bisection_root or run.id
        middle = (len(group) + 1) // 2
        halves = [tuple(e.id for e in group[:middle]), tuple(e.id for e in group[middle:])]
        dependents = tuple(d for d in run.dependent_prs if d in self.entries)
        # The failed batch is the first failure of its bisection (it names itself the root), so
        # it is remembered among the bisection's failed runs for the redundant-test check.
        run = replace(run, bisection_root=root)
        self.runs[run.id] = run
        self.close_run(run)
        for half in halves:
            created = self.new_run(
                tested=half,
                dependents=dependents,
                kind=TestRunKind.BISECTION,
                status=TestRunStatus.QUEUED,
                root=root,
            )
            if self.skip_redundant(created):
                continue
            for entry_id in half:
                self.move(
                    self.entries[entry_id],
                    PrState.PENDING,
                    StateReason.BISECTING,
                    run_id=created.id,
                )
            dependents = (*dependents, *half)

    def skip_redundant(self, run: TestRun) -> bool:
        """`bisection_skip_redundant_tests`: a set that already failed in this bisection on the
        same base is not tested again. Returns True when the run was resolved without testing.

        The set is the whole predicted branch (dependents and tested PRs alike): the second half
        of a bisected batch, tested on top of the first, is the batch that just failed.
        """
        if (
            self.queue.config.optimization_mode
            is not OptimizationMode.BISECTION_SKIP_REDUNDANT_TESTS
        ):
            return False
        key = (run.base_sha, frozenset(run.members))
        failed_before = any(
            f.bisection_root == run.bisection_root and (f.base_sha, frozenset(f.members)) == key
            for f in self.failed_runs
        )
        if not failed_before:
            return False
        if len(run.tested_prs) > 1 or not run.dependent_prs:
            self.put_run(
                replace(
                    run,
                    status=TestRunStatus.FAILED,
                    failure_reason=StateReason.TEST_RUN_FAILED_BY_OPTIMIZATION,
                    started_at=self.now,
                    finished_at=self.now,
                )
            )
            for entry_id in run.tested_prs:
                self.move(
                    self.entries[entry_id],
                    PrState.PENDING_FAILURE,
                    StateReason.TEST_RUN_FAILED_BY_OPTIMIZATION,
                    run_id=run.id,
                )
            return True
        return False

    def new_run(
        self,
        *,
        tested: tuple[PullRequestId, ...],
        dependents: tuple[PullRequestId, ...],
        kind: TestRunKind,
        status: TestRunStatus,
        root: TestRunId | None = None,
    ) -> TestRun:
        seq = self.queue.run_seq + 1
        self.queue = replace(self.queue, run_seq=seq)
        run_id = TestRunId(str(uuid.uuid5(_RUN_ID_NAMESPACE, f"{self.queue.id}/{seq}")))
        first = self.entries[tested[0]]
        run = TestRun(
            id=run_id,
            queue_id=self.queue.id,
            kind=kind,
            status=status,
            branch=test_branch_name(first.number, run_id, prefix=self.policy.test_branch_prefix),
            base_sha=self.queue.target_sha or "",
            sha=None,
            tested_prs=tested,
            dependent_prs=dependents,
            required_statuses=self.required_statuses(),
            created_at=self.now,
            bisection_root=root,
            started_at=self.now if status is TestRunStatus.IN_PROGRESS else None,
        )
        self.put_run(run)
        if status is TestRunStatus.IN_PROGRESS:
            self.build(run)
        return run

    def build(self, run: TestRun) -> None:
        prs = tuple((self.entries[m].number, self.entries[m].head_sha) for m in run.members)
        self.emit(BuildTestCommit(run.id, run.base_sha, prs, run.branch))

    def land_next(self) -> None:
        """Land the first passed entry with nothing live ahead of it; one landing at a time."""
        if self.queue.state is QueueState.PAUSED or self.landing_in_flight() is not None:
            return
        tip = self.queue.target_sha
        if tip is None:
            return
        order = self.order()
        deps = self.deps(order)
        for entry in order:
            if deps.get(entry.id):
                continue
            if entry.state is PrState.TESTS_PASSED and entry.verified_by_test_run is not None:
                run = self.runs.get(entry.verified_by_test_run)
                if run is None or self.stale_reason(run, deps) is not None:
                    # A PR in its test branch failed or left in this very round: the tested
                    # tree is not the one that would land. The next round re-tests it.
                    continue
                landing = self.landing_from_run(entry, tip)
            elif entry.state is PrState.PENDING and self.can_merge_directly(entry, order, deps):
                landing = self.direct_landing(entry, tip)
            else:
                continue
            if landing is not None:
                self.emit(landing)
                return

    def landing_from_run(self, entry: QueueEntry, tip: str) -> Land | None:
        run = self.runs.get(entry.verified_by_test_run or TestRunId(""))
        if run is None or run.sha is None:
            return None
        index = next((i for i, link in enumerate(run.chain) if link.number == entry.number), None)
        if index is None:
            return None
        link = run.chain[index]
        if index == 0:
            parent_commit, parent_tree = run.base_sha, run.base_tree
        else:
            parent_commit, parent_tree = run.chain[index - 1].commit, run.chain[index - 1].tree
        return Land(
            entry_id=entry.id,
            number=entry.number,
            run_id=run.id,
            target_branch=self.queue.branch,
            expected_tip=tip,
            method=self.queue.config.merge_method,
            link=link,
            parent_commit=parent_commit,
            parent_tree=parent_tree,
            exact=self.queue.mode is QueueMode.SINGLE,
            title=entry.title,
            author=entry.author,
            token=f"{run.id}/{entry.number}",
        )

    def can_merge_directly(
        self,
        entry: QueueEntry,
        order: tuple[QueueEntry, ...],
        deps: dict[PullRequestId, tuple[PullRequestId, ...]],
    ) -> bool:
        """Direct merge: up to date, alone in its lane, its own required checks green."""
        if self.queue.config.direct_merge_mode is not DirectMergeMode.ALWAYS:
            return False
        if not entry.is_up_to_date or self.current_run(entry.id) is not None:
            return False
        if deps.get(entry.id):
            return False  # PRs ahead in its lane: it is tested on top of them instead
        if self.queue.config.batch and len(order) > 1:
            return False
        if any(entry.id in deps.get(other.id, ()) for other in order):
            return False
        required = self.required_statuses()
        reported = self.statuses.get(entry.head_sha, {})
        return bool(required) and all(
            reported.get(context) is CommitState.SUCCESS for context in required
        )

    def direct_landing(self, entry: QueueEntry, tip: str) -> Land:
        head = entry.head_sha
        return Land(
            entry_id=entry.id,
            number=entry.number,
            run_id=None,
            target_branch=self.queue.branch,
            expected_tip=tip,
            method=self.queue.config.merge_method,
            link=ChainLink(entry.number, head, head, ""),
            parent_commit=tip,
            parent_tree=None,
            exact=True,
            title=entry.title,
            author=entry.author,
            token=f"direct/{entry.id}/{head}",
        )

    def start_queued_bisections(self) -> None:
        if self.queue.state is QueueState.PAUSED or self.queue.target_sha is None:
            return
        busy = sum(
            1
            for r in self.runs.values()
            if r.kind is TestRunKind.BISECTION and r.status is TestRunStatus.IN_PROGRESS
        )
        free = self.queue.config.bisection_concurrency - busy
        queued = [r for r in self.runs.values() if r.status is TestRunStatus.QUEUED]
        position = {e.id: i for i, e in enumerate(self.order())}
        queued.sort(key=lambda r: position.get(r.tested_prs[0], len(position)))
        for run in queued[: max(free, 0)]:
            # Dependents that merged meanwhile are in the tip now.
            started = replace(
                run,
                status=TestRunStatus.IN_PROGRESS,
                base_sha=self.queue.target_sha,
                dependent_prs=tuple(d for d in run.dependent_prs if d in self.entries),
                started_at=self.now,
            )
            self.put_run(started)
            self.build(started)

    def start_runs(self) -> None:
        """Start runs for pending entries, front first, while main capacity lasts."""
        if self.queue.state is QueueState.PAUSED or self.queue.target_sha is None:
            return
        busy = sum(
            1
            for r in self.runs.values()
            if r.kind is TestRunKind.MAIN and r.status is TestRunStatus.IN_PROGRESS
        )
        free = self.queue.config.concurrency - busy
        if free <= 0:
            return
        order = self.order()
        deps = self.deps(order)
        landing = self.landing_in_flight()
        taken: set[PullRequestId] = set()
        held: set[PullRequestId] = set()  # entries behind a batch that is still forming
        for entry in order:
            if free <= 0:
                return
            if entry.state is not PrState.PENDING or entry.id in taken:
                continue
            if self.current_run(entry.id) is not None:
                continue
            if landing is not None and landing.entry_id == entry.id:
                continue
            if held & set(deps.get(entry.id, ())):
                continue
            if self.can_merge_directly(entry, order, deps):
                continue  # land_next merges it without a run
            if self.blocked_by_failure(entry, deps):
                continue
            if not self.required_statuses():
                self.move(entry, PrState.FAILED, StateReason.NO_REQUIRED_STATUSES)
                return
            group = self.batch_for(entry, order, deps, taken)
            if group is None:
                held.add(entry.id)
                continue
            taken.update(group)
            dependents = tuple(d for d in deps.get(entry.id, ()) if d in self.entries)
            self.new_run(
                tested=group,
                dependents=dependents,
                kind=TestRunKind.MAIN,
                status=TestRunStatus.IN_PROGRESS,
            )
            free -= 1

    def blocked_by_failure(
        self, entry: QueueEntry, deps: dict[PullRequestId, tuple[PullRequestId, ...]]
    ) -> bool:
        """No new run on top of a failed PR beyond `pendingFailureDepth` successors."""
        depth = self.queue.config.pending_failure_depth
        for ahead_id in deps.get(entry.id, ()):
            ahead = self.entries[ahead_id]
            if ahead.state is not PrState.PENDING_FAILURE:
                continue
            failed = self.current_run(ahead_id)
            if failed is None or len(self.successors(failed)) >= depth:
                return True
        return False

    def batch_for(
        self,
        entry: QueueEntry,
        order: tuple[QueueEntry, ...],
        deps: dict[PullRequestId, tuple[PullRequestId, ...]],
        taken: set[PullRequestId],
    ) -> tuple[PullRequestId, ...] | None:
        """The group to test from `entry`: itself, or a batch of the pending PRs right behind
        it in its lane. None while a batch is still forming (too small, not waited long enough).
        """
        config = self.queue.config
        if not config.batch or entry.no_batch:
            return (entry.id,)
        group = [entry]
        base = set(deps.get(entry.id, ()))
        for other in order:
            if len(group) >= config.batching_min_size:
                break
            if other.id == entry.id or other.id in taken or other.no_batch:
                continue
            if other.state is not PrState.PENDING or self.current_run(other.id) is not None:
                continue
            other_deps = set(deps.get(other.id, ()))
            if entry.id in other_deps and other_deps - {g.id for g in group} <= base:
                group.append(other)
        if len(group) >= config.batching_min_size:
            return tuple(g.id for g in group)
        oldest = min(g.state_changed_at for g in group)
        if self.now >= oldest + timedelta(minutes=config.batching_max_wait_time_minutes):
            return tuple(g.id for g in group)
        return None

    def close_unused_runs(self) -> None:
        """A run closes once no live entry is tested or vouched for by it (a running one is
        cancelled: a successor's pass cleared everything it was testing).
        """
        for run in list(self.runs.values()):
            in_use = any(
                (e.id in run.tested_prs and e.verified_by_test_run in (None, run.id))
                or e.verified_by_test_run == run.id
                for e in self.entries.values()
                if e.state.is_admitted
            )
            if not in_use:
                self.close_run(run)

    def finish_mode_switch(self) -> None:
        """`switching_modes` ends, in the new mode, once the queue has emptied."""
        if self.queue.state is not QueueState.SWITCHING_MODES:
            return
        if any(e.state.is_admitted for e in self.entries.values()) or self.runs:
            return
        mode = self.queue.pending_mode or self.queue.mode
        self.queue = replace(
            self.queue, state=QueueState.RUNNING, mode=mode, pending_mode=None, updated_at=self.now
        )
        self.changed = True
