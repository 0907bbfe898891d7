"""The scheduler's working copy of one queue: the state `decide` changes in place, and the
changes every part of it makes (move an entry, open or close a run, order the queue, drop what
went stale).
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import datetime
from typing import assert_never

from keepgreen.core.enums import (
    CommitState,
    PrState,
    QueueMode,
    QueueState,
    StateReason,
    TestRunKind,
    TestRunStatus,
)
from keepgreen.core.ids import PullRequestId, TestRunId
from keepgreen.core.model import QueueEntry, StateChange, TestRun
from keepgreen.core.ordering import Placed, queue_order
from keepgreen.core.scheduler import adaptive
from keepgreen.core.scheduler.effects import (
    BuildTestCommit,
    CancelCi,
    DeleteTestBranch,
    Effect,
    Land,
)
from keepgreen.core.scheduler.lanes import dependencies
from keepgreen.core.scheduler.state import (
    Decision,
    EngineState,
    Policy,
)
from keepgreen.core.scheduler.tracked import Tracked

_RUN_ID_NAMESPACE = uuid.UUID("5b0f4c52-8a53-4c1e-9d3e-6f2f1b1c7a10")
FAILING = frozenset({CommitState.FAILURE, CommitState.ERROR})
PASSING = frozenset({CommitState.SUCCESS})
SKIPPED = frozenset({CommitState.SKIPPED, CommitState.NEUTRAL})
RUNNING = frozenset({TestRunStatus.QUEUED, TestRunStatus.IN_PROGRESS})


def test_branch_name(number: int, run_id: TestRunId, *, prefix: str) -> str:
    """`<prefix>/pr-<N>/<testRunId>`; a batch is named after its first PR."""
    return f"{prefix}/pr-{number}/{run_id}"


class Working:
    """A working copy of one queue's state, changed in place while deciding."""

    def __init__(self, state: EngineState, *, now: datetime, policy: Policy) -> None:
        self.queue = state.queue
        self.now = now
        self.policy = policy
        # Tracked: the queue order, the dependencies and the run testing each entry are derived
        # from these and kept until one of them changes (`order`, `deps`, `current_run`).
        self.entries: Tracked[PullRequestId, QueueEntry] = Tracked((e.id, e) for e in state.entries)
        self.runs: Tracked[TestRunId, TestRun] = Tracked((r.id, r) for r in state.runs)
        self.failed_runs = list(state.failed_runs)
        self.targets: Tracked[PullRequestId, tuple[str, ...] | None] = Tracked(state.targets)
        self._order: tuple[tuple[int, int], tuple[QueueEntry, ...]] | None = None
        self._deps: (
            tuple[
                tuple[QueueEntry, ...],
                tuple[int, QueueMode, str | None, bool],
                dict[PullRequestId, tuple[PullRequestId, ...]],
            ]
            | None
        ) = None
        self._testing: tuple[int, dict[PullRequestId, TestRun]] | None = None
        self._successors: tuple[int, dict[TestRunId, tuple[TestRun, list[TestRun]]]] | None = None
        self.statuses = state.statuses
        self.test_failures = state.test_failures
        self.in_flight: list[Effect] = list(state.in_flight)
        self.effects: list[Effect] = []
        self.changes: list[StateChange] = []
        self.departed: dict[PullRequestId, QueueEntry] = {}
        self.closed: dict[TestRunId, TestRun] = {}
        self.changed = False

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
            test_failures=self.test_failures,
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

    def move(
        self,
        entry: QueueEntry,
        state: PrState,
        reason: StateReason,
        *,
        run_id: TestRunId | None = None,
        verified_by: TestRunId | None = None,
        detail: str | None = None,
    ) -> QueueEntry:
        """Change an entry's state and record the change (and `detail`) in its history."""
        updated = replace(
            entry,
            state=state,
            state_reason=reason,
            state_changed_at=self.now,
            verified_by_test_run=verified_by,
            is_submitted=entry.is_submitted and not state.is_terminal,
        )
        self.changes.append(
            StateChange(
                entry.id, entry.queue_id, entry.state, state, reason, self.now, run_id, detail
            )
        )
        if state is PrState.MERGED:
            self.progressed()
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
        if run.status is TestRunStatus.IN_PROGRESS and run.started_at == self.now:
            self.progressed()

    def testing_timeout_seconds(self) -> int:
        return adaptive.testing_timeout_seconds(self.queue)

    def batch_size(self) -> int:
        return adaptive.batch_size(self.queue)

    def depth(self) -> int:
        return adaptive.depth(self.queue)

    def finished_main(self, run: TestRun, *, failed: bool) -> None:
        """A main run's verdict feeds the failure rate and the depth's window."""
        if run.kind is not TestRunKind.MAIN:
            return
        stats = self.queue.stats.finished_main(size=len(run.tested_prs), failed=failed)
        stats = replace(stats, depth=adaptive.next_depth(self.queue, failed=failed))
        self.queue = replace(self.queue, stats=stats)

    def judged(self, *, spurious: bool) -> None:
        """A failure turned out spurious (the same PRs passed) or stood (a PR left for it)."""
        self.queue = replace(self.queue, stats=self.queue.stats.judged(spurious=spurious))

    def progressed(self) -> None:
        """The queue moved on (a run started, a PR merged): it is not stalled."""
        if self.queue.stats.last_progress_at != self.now:
            stats = replace(self.queue.stats, last_progress_at=self.now)
            self.queue = replace(self.queue, stats=stats)

    def close_run(self, run: TestRun, status: TestRunStatus | None = None) -> None:
        """Close a run: it stops counting, its CI stops and its branch is deleted."""
        if status is not None and run.status in RUNNING:
            run = replace(run, status=status, finished_at=self.now)
        if run.status in RUNNING:
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
        if self._testing is None or self._testing[0] != self.runs.version:
            testing: dict[PullRequestId, TestRun] = {}
            for run in self.runs.values():
                for tested in run.tested_prs:
                    testing.setdefault(tested, run)  # the first, as a scan would find
            self._testing = (self.runs.version, testing)
        return self._testing[1].get(entry_id)

    def entry_by_number(self, number: int) -> QueueEntry | None:
        return next((e for e in self.entries.values() if e.number == number), None)

    def required_statuses(self) -> tuple[str, ...]:
        return self.policy.required_statuses(self.queue)

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

    def order(self) -> tuple[QueueEntry, ...]:
        """`queue_order`, with the entries already placed on a test branch in the order of the
        branches they are on.

        Every live member of an open run is placed, dependents included: a PR whose own run was
        abandoned (restarted, or landing) stays in front of the runs built on top of it, which
        go on. Placed entries go by their depth in the runs that hold them, not by admission: a
        PR that went ahead by priority, or that became ready late, was placed on top of the PRs
        already placed and must stay there once placed itself, or the runs built on it would
        look stale forever.

        Kept until the entries or the runs change (the result is a tuple: nobody can alter it).
        """
        key = (self.entries.version, self.runs.version)
        if self._order is not None and self._order[0] == key:
            return self._order[1]
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
        # queue_order sorts placed entries by position: hand it their rank instead (and every
        # entry as the little it orders by, not a copy of the whole entry).
        ranked = {e.id: Placed(e.id, e.state, e.priority, rank) for rank, e in enumerate(placed)}
        ordered = queue_order(
            (
                ranked.get(e.id) or Placed(e.id, e.state, e.priority, e.position)
                for e in self.entries.values()
            ),
            holding=frozenset(holding),
        )
        result = tuple(self.entries[e.id] for e in ordered)
        self._order = (key, result)
        return result

    def deps(self, order: tuple[QueueEntry, ...]) -> dict[PullRequestId, tuple[PullRequestId, ...]]:
        """Who each entry is tested on top of (see `lanes.dependencies`). Entries set aside (a
        failed batch's PRs tested alone beside the queue) are on top of what their own run
        holds, and nobody is on top of them: the line goes on without them.

        Kept while the order, the mode, the targets and the tip are the same; callers only
        read it.
        """
        cached = self._deps
        key = (
            self.targets.version,
            self.queue.mode,
            self.queue.target_sha,
            self.queue.config.bisect_beside_queue,
        )
        if cached is not None and cached[0] is order and cached[1] == key:
            return cached[2]
        found = dependencies(order, mode=self.queue.mode, targets=self.targets)
        aside = self.aside()
        if aside:
            # The line is read without the entries set aside. Only dropping them from each
            # entry's list kept what an entry was on top of through them (parallel mode: PR 3
            # on top of 5 only because 16, set aside, shares targets with both); a run started
            # on that moved 3 in the order, where it was on top of nothing, so the run was
            # stale at once, dropped, started again, and the round never settled.
            line = dependencies(
                tuple(e for e in order if e.id not in aside),
                mode=self.queue.mode,
                targets=self.targets,
            )
            for entry_id in found:
                if entry_id in aside:
                    run = aside[entry_id]
                    found[entry_id] = tuple(d for d in run.dependent_prs if d in self.entries)
                else:
                    found[entry_id] = line.get(entry_id, ())
        self._deps = (order, key, found)
        return found

    def aside(self) -> dict[PullRequestId, TestRun]:
        """The entries tested alone beside the queue, with their run (`bisectBesideQueue`)."""
        if not self.queue.config.bisect_beside_queue:
            return {}
        return {
            entry_id: run
            for run in self.runs.values()
            if run.kind is TestRunKind.BISECTION
            for entry_id in run.tested_prs
            if entry_id in self.entries
        }

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

    def set_tip(self, sha: str) -> None:
        """The target branch is at `sha` now: no PR head contains it (until the code host says
        otherwise with `ReadinessChanged`), so no entry is up to date any more.
        """
        self.queue = replace(self.queue, target_sha=sha)
        for entry in list(self.entries.values()):
            if entry.is_up_to_date:
                self.entries[entry.id] = replace(entry, is_up_to_date=False)
        self.changed = True

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

    def new_run(
        self,
        *,
        tested: tuple[PullRequestId, ...],
        dependents: tuple[PullRequestId, ...],
        kind: TestRunKind,
        status: TestRunStatus,
        root: TestRunId | None = None,
        attempt: int = 0,
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
            attempt=attempt,
        )
        self.put_run(run)
        if status is TestRunStatus.IN_PROGRESS:
            self.build(run)
        return run

    def start_queued(self, kind: TestRunKind) -> int:
        """Start queued runs of `kind` (bisections, retries), front first, while its capacity
        lasts (`depth` for main runs, `bisectionConcurrency` for the others); how many of `kind`
        are in progress afterwards.
        """
        capacity = (
            self.depth() if kind is TestRunKind.MAIN else self.queue.config.bisection_concurrency
        )
        busy = sum(
            1
            for r in self.runs.values()
            if r.kind is kind and r.status is TestRunStatus.IN_PROGRESS
        )
        if self.queue.state is QueueState.PAUSED or self.queue.target_sha is None:
            return busy
        queued = [
            r for r in self.runs.values() if r.kind is kind and r.status is TestRunStatus.QUEUED
        ]
        if not queued or busy >= capacity:
            return busy
        position = {e.id: i for i, e in enumerate(self.order())}
        queued.sort(key=lambda r: position.get(r.tested_prs[0], len(position)))
        for run in queued[: capacity - busy]:
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
            busy += 1
        return busy

    def build(self, run: TestRun) -> None:
        prs = tuple((self.entries[m].number, self.entries[m].head_sha) for m in run.members)
        self.emit(BuildTestCommit(run.id, run.base_sha, prs, run.branch))

    def successors(self, run: TestRun) -> list[TestRun]:
        """Open runs behind this one that include its tested PRs in their predicted branch.

        Kept until the runs change (for the very run asked about: a closed run may be asked).
        """
        if self._successors is None or self._successors[0] != self.runs.version:
            self._successors = (self.runs.version, {})
        found = self._successors[1].get(run.id)
        if found is None or found[0] is not run:
            tested = set(run.tested_prs)
            behind = [
                r for r in self.runs.values() if r.id != run.id and tested & set(r.dependent_prs)
            ]
            found = (run, behind)
            self._successors[1][run.id] = found
        return list(found[1])
