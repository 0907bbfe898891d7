"""Runs and scheduling: start runs up to the concurrency (single PRs or batches), build and
time them, read their statuses, drop the stale ones and close the unused.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from keepgreen.core.enums import (
    CommitState,
    PrState,
    QueueState,
    StateReason,
    TestRunKind,
    TestRunStatus,
)
from keepgreen.core.ids import PullRequestId, TestRunId
from keepgreen.core.model import ChainLink, QueueEntry, TestRun
from keepgreen.core.scheduler.effects import (
    BuildTestCommit,
    CancelCi,
    StartCi,
)
from keepgreen.core.scheduler.landing import Landing
from keepgreen.core.scheduler.state import (
    BUILT_IN_CI_CONTEXT,
)
from keepgreen.core.scheduler.working import FAILING, PASSING, SKIPPED


class Runs(Landing):
    """Open, follow and close test runs."""

    def start_runs(self) -> None:
        """Start runs for pending entries, front first, while main capacity lasts."""
        if self.queue.state is QueueState.PAUSED or self.queue.target_sha is None:
            return
        # Retries waiting for a slot go first: they are ahead in line.
        free = self.depth() - self.start_queued(TestRunKind.MAIN)
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
        size = self.batch_size()
        if not config.batch or entry.no_batch or size == 1:
            return (entry.id,)
        group = [entry]
        base = set(deps.get(entry.id, ()))
        for other in order:
            if len(group) >= size:
                break
            if other.id == entry.id or other.id in taken or other.no_batch:
                continue
            if other.state is not PrState.PENDING or self.current_run(other.id) is not None:
                continue
            other_deps = set(deps.get(other.id, ()))
            if entry.id in other_deps and other_deps - {g.id for g in group} <= base:
                group.append(other)
        if len(group) >= size:
            return tuple(g.id for g in group)
        oldest = min(g.state_changed_at for g in group)
        if self.now >= oldest + timedelta(minutes=config.batching_max_wait_time_minutes):
            return tuple(g.id for g in group)
        return None

    def start_queued_bisections(self) -> None:
        self.start_queued(TestRunKind.BISECTION)

    def built(self, run_id: TestRunId, base_tree: str, links: tuple[ChainLink, ...]) -> None:
        self.forget_effect(BuildTestCommit, run_id)
        run = self.runs.get(run_id)
        if run is None or run.sha is not None or run.status is not TestRunStatus.IN_PROGRESS:
            return
        sha = links[-1].commit if links else run.base_sha
        self.put_run(replace(run, sha=sha, base_tree=base_tree, chain=links))
        if self.policy.has_built_in_ci and BUILT_IN_CI_CONTEXT in run.required_statuses:
            timeout = self.testing_timeout_seconds()
            self.emit(StartCi(run_id, sha, timeout))

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
        self.emit(StartCi(run_id, run.sha, self.testing_timeout_seconds()))
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

    def time_out_runs(self) -> None:
        """A run without a result fails after the testing timeout; a built run whose required
        check has not even started (no status at all) fails sooner, after the check start
        timeout: "check X never started" instead of a silent wait.
        """
        limit = timedelta(seconds=self.testing_timeout_seconds())
        start_limit = timedelta(minutes=self.queue.config.check_start_timeout_minutes)
        for run in list(self.runs.values()):
            if run.status is not TestRunStatus.IN_PROGRESS:
                continue
            started = run.started_at or run.created_at
            if self.now >= started + limit:
                self.fail_run(run, StateReason.TEST_RUN_TIMEOUT)
                self.finished_main(run, failed=True)
                continue
            if run.sha is None or not start_limit or self.now < started + start_limit:
                continue
            reported = self.statuses.get(run.sha, {})
            missing = [context for context in run.required_statuses if context not in reported]
            if missing:
                self.fail_run(run, StateReason.CHECK_NEVER_STARTED, ", ".join(missing))

    def fail_run(self, run: TestRun, reason: StateReason, detail: str | None = None) -> None:
        failed = replace(
            run,
            status=TestRunStatus.FAILED,
            failure_reason=reason,
            failure_detail=detail,
            finished_at=self.now,
        )
        self.put_run(failed)
        if self.policy.has_built_in_ci:
            self.emit(CancelCi(run.id))

    def read_statuses(self) -> None:
        """A run passes when every required status is success on its head (or, where the queue
        accepts them, skipped or neutral); any failure fails it. A required check that
        concluded skipped or neutral fails it where the queue does not accept them: nothing was
        tested, and a run passes only on real results.
        """
        accept = self.queue.config.accept_skipped_checks
        passing = PASSING | SKIPPED if accept else PASSING
        for run in list(self.runs.values()):
            if run.status is not TestRunStatus.IN_PROGRESS or run.sha is None:
                continue
            reported = self.statuses.get(run.sha, {})
            required = [reported.get(context) for context in run.required_statuses]
            skipped = [c for c in run.required_statuses if reported.get(c) in SKIPPED]
            if any(state in FAILING for state in required):
                self.put_run(
                    replace(
                        run,
                        status=TestRunStatus.FAILED,
                        failure_reason=StateReason.TESTS_FAILED,
                        finished_at=self.now,
                    )
                )
                self.finished_main(run, failed=True)
            elif skipped and not accept:
                self.fail_run(run, StateReason.CHECK_SKIPPED, ", ".join(skipped))
            elif required and all(state in passing for state in required):
                self.put_run(
                    replace(
                        run,
                        status=TestRunStatus.SUCCEEDED,
                        failure_reason=None,
                        finished_at=self.now,
                    )
                )
                self.finished_main(run, failed=False)
                seconds = int((self.now - (run.started_at or run.created_at)).total_seconds())
                self.queue = replace(self.queue, stats=self.queue.stats.passed_in(seconds))
                if run.attempt:
                    # The retry passed: the failure before it was spurious.
                    self.judged(spurious=True)

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

    def follow_runs(self) -> None:
        """Entries show the state of the run testing them."""
        for run in list(self.runs.values()):
            for entry_id in run.tested_prs:
                entry = self.entries.get(entry_id)
                if entry is not None and entry.state.is_admitted:
                    self.follow_run(entry, run)

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
