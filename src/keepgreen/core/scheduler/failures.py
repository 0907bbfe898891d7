"""Failure resolution: when a failed run becomes a verdict, and bisection of a failed batch."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import timedelta

from keepgreen.core.enums import (
    FlakyFailures,
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

# Failures that may be spurious: a retry can tell. (A merge conflict, a skipped check or a
# failure found by the redundant-test cache would only repeat.)
RETRYABLE = frozenset(
    {StateReason.TESTS_FAILED, StateReason.TEST_RUN_TIMEOUT, StateReason.CHECK_NEVER_STARTED}
)
# What ejecting a good PR costs, counted in runs: its author must notice and queue it again,
# it waits the whole line again, and the PRs tested on top of it are tested again too. A retry
# costs one run, so a lone failure is retried when more than one in ten such failures is
# spurious.
WRONG_EJECTION_RUNS = 20
# How long a failed run waits for its JUnit results before it counts without them.
RESULTS_GRACE = timedelta(minutes=5)


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
            if self.settle_flaky(run, group):
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
            self.conclude(run, group)

    def conclude(self, run: TestRun, group: list[QueueEntry]) -> None:
        """The failure is believed: retry the run when that pays, else fail a lone PR, or find
        the culprit of a batch (beside the queue, or by bisection in line).
        """
        beside = self.queue.config.bisect_beside_queue and run.kind is TestRunKind.MAIN
        if beside and len(group) > 1:
            self.isolate(run, group)
        elif beside and self.retry_pays(run, group):
            # The retry runs beside the queue too: the line does not wait for it.
            self.isolate(run, group, retry=self.failure_words(run))
        elif self.retry_pays(run, group):
            self.retry(run, group, self.failure_words(run))
        elif len(group) == 1:
            reason = run.failure_reason or StateReason.TESTS_FAILED
            detail = run.failure_detail
            self.move(group[0], PrState.FAILED, reason, run_id=run.id, detail=detail)
            self.close_run(run)
            if reason in RETRYABLE and run.attempt:
                self.judged(spurious=False)  # every retry failed too: the failure was real
            elif reason in RETRYABLE and self.queue.config.max_retries:
                # Not retried: no new evidence, and the old evidence ages, so a queue whose
                # record stopped its retries tries again in time instead of never learning.
                self.queue = replace(self.queue, stats=self.queue.stats.aged())
        else:
            self.bisect(run, group)

    def settle_flaky(self, run: TestRun, group: list[QueueEntry]) -> bool:
        """`flakyFailures`: a failed run whose uploaded results show only known flaky or
        quarantined tests failing passes (`pass`) or is retried (`retry`, at least once). While
        results may still arrive (the repository uploads them), the failure waits a little.
        Returns True when the run was settled here (or waits).
        """
        action = self.queue.config.flaky_failures
        if action is FlakyFailures.OFF or run.failure_reason is not StateReason.TESTS_FAILED:
            return False
        failures = self.test_failures.get(run.sha or "")
        if failures is None:
            finished = run.finished_at or self.now
            return self.policy.uploads_test_results and self.now < finished + RESULTS_GRACE
        if not failures.only_flaky:
            return False
        why = "only known flaky tests failed: " + ", ".join(failures.flaky)
        if action is FlakyFailures.PASS:
            self.put_run(
                replace(
                    run,
                    status=TestRunStatus.SUCCEEDED,
                    failure_reason=StateReason.FLAKY_FAILURES_FORGIVEN,
                    failure_detail=why,
                )
            )
            for entry in group:
                self.move(
                    entry,
                    PrState.TESTS_PASSED,
                    StateReason.FLAKY_FAILURES_FORGIVEN,
                    run_id=run.id,
                    verified_by=run.id,
                    detail=why,
                )
            return True
        if run.attempt < max(1, self.queue.config.max_retries):
            self.retry(run, group, why)
            return True
        return False

    def retry_pays(self, run: TestRun, group: list[QueueEntry]) -> bool:
        """Retry a failed run alone (up to `maxRetries`) when that is cheaper in expectation:
        the chance the failure is spurious (the queue's recent record) times what a wrong
        verdict costs (a good PR ejected and queued again; a bisection of the batch) is more
        than the one run a retry costs. A check that never started is retried while retries
        remain: that is no verdict on the code.
        """
        if run.attempt >= self.queue.config.max_retries or run.failure_reason not in RETRYABLE:
            return False
        if run.failure_reason is StateReason.CHECK_NEVER_STARTED:
            return True
        size = len(group)
        wrong_verdict = WRONG_EJECTION_RUNS if size == 1 else 2 * math.ceil(math.log2(size))
        return self.queue.stats.spurious_share * wrong_verdict > 1

    def retry(self, run: TestRun, group: list[QueueEntry], why: str) -> None:
        """Test the failed group again, alone, on the same predicted branch (the PRs ahead that
        merged meanwhile are in the tip now).
        """
        tested = tuple(entry.id for entry in group)
        dependents = tuple(d for d in run.dependent_prs if d in self.entries)
        self.close_run(run)
        created = self.new_run(
            tested=tested,
            dependents=dependents,
            kind=run.kind,
            status=TestRunStatus.QUEUED,  # started when its kind has a free slot
            root=run.bisection_root,
            attempt=run.attempt + 1,
        )
        total = max(self.queue.config.max_retries, created.attempt) + 1
        self.start_queued(created.kind)
        started = self.runs[created.id].status is TestRunStatus.IN_PROGRESS
        for entry_id in tested:
            self.move(
                self.entries[entry_id],
                PrState.TESTING if started else PrState.PENDING,
                StateReason.RETRYING,
                run_id=created.id,
                detail=f"attempt {created.attempt + 1} of {total}: {why}",
            )

    @staticmethod
    def failure_words(run: TestRun) -> str:
        reason = run.failure_reason or StateReason.TESTS_FAILED
        words = reason.value.replace("_", " ")
        return f"{words} ({run.failure_detail})" if run.failure_detail else words

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

    def isolate(self, run: TestRun, group: list[QueueEntry], *, retry: str | None = None) -> None:
        """`bisectBesideQueue`: test each PR of the failed batch alone, beside the queue, on the
        branch the batch was tested on (the PRs ahead of it). The line stops depending on them
        at once (`deps`): the runs behind the batch go stale and are tested again without it.
        A PR whose own run fails is a culprit (once retries, beside the queue too, are spent);
        one whose run passes rejoins the line (`rejoin_cleared`). A lone PR whose failure is
        worth a retry is retried the same way: `retry` says why.
        """
        dependents = tuple(d for d in run.dependent_prs if d in self.entries)
        self.close_run(run)
        attempt = 0 if retry is None else run.attempt + 1
        for entry in group:
            created = self.new_run(
                tested=(entry.id,),
                dependents=dependents,
                kind=TestRunKind.BISECTION,
                status=TestRunStatus.QUEUED,
                root=run.id,
                attempt=attempt,
            )
            if retry is None:
                self.move(entry, PrState.PENDING, StateReason.BISECTING, run_id=created.id)
                continue
            self.start_queued(TestRunKind.BISECTION)
            started = self.runs[created.id].status is TestRunStatus.IN_PROGRESS
            total = max(self.queue.config.max_retries, attempt) + 1
            self.move(
                entry,
                PrState.TESTING if started else PrState.PENDING,
                StateReason.RETRYING,
                run_id=created.id,
                detail=f"attempt {attempt + 1} of {total}, beside the queue: {retry}",
            )

    def rejoin_cleared(self) -> None:
        """A PR set aside whose own run passed was not the culprit: it rejoins the line behind
        the PRs being tested (its run tested it on a branch the line has left), where it is
        tested with the rest and lands in order. When the line is empty and the run tested
        exactly what would land now, the run joins the line instead (one at a time) and the
        PR lands from it.
        """
        aside = self.aside()
        cleared = [
            (self.entries[entry_id], run)
            for entry_id, run in aside.items()
            if run.status is TestRunStatus.SUCCEEDED
        ]
        if not cleared:
            return
        if not any(r.kind is TestRunKind.MAIN for r in self.runs.values()):
            # Nothing in line: a run that passed on the tip with nothing ahead is the line's
            # own front run now, and its PR lands as tested.
            for _, run in cleared:
                if self.lands_as_tested(run):
                    self.put_run(replace(run, kind=TestRunKind.MAIN))
                    return
        placed = [
            e.position
            for e in self.entries.values()
            if e.id not in aside and self.current_run(e.id) is not None
        ]
        behind = max(placed, default=0)
        for entry, run in sorted(cleared, key=lambda pair: pair[0].position):
            self.close_run(run)
            rejoined = replace(entry, position=max(entry.position, behind))
            self.move(
                rejoined,
                PrState.PENDING,
                StateReason.CLEARED_BY_ISOLATION,
                run_id=run.id,
            )

    def lands_as_tested(self, run: TestRun) -> bool:
        """A passed run on the current tip with no PR left ahead of it: what it tested is what
        would land now.
        """
        return (
            run.status is TestRunStatus.SUCCEEDED
            and run.base_sha == self.queue.target_sha
            and not any(d in self.entries for d in run.dependent_prs)
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
