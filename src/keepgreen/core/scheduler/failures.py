"""Failure resolution: when a failed run becomes a verdict, and bisection of a failed batch."""

from __future__ import annotations

from dataclasses import replace

from keepgreen.core.enums import (
    OptimizationMode,
    PrState,
    QueueState,
    StateReason,
    TestRunKind,
    TestRunStatus,
)
from keepgreen.core.ids import PullRequestId
from keepgreen.core.model import QueueEntry, TestRun
from keepgreen.core.scheduler.working import RUNNING, Working


class Failures(Working):
    """Pending failures, their successors, and bisection."""

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
        if any(r.status in RUNNING for r in window):
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
