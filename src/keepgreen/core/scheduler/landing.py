"""Landing: the passed front of each lane merges, one landing at a time; optimistic merge and
direct merge; what the code host answered.
"""

from __future__ import annotations

from keepgreen.core.enums import (
    CommitState,
    DirectMergeMode,
    PrState,
    QueueMode,
    QueueState,
    StateReason,
    TestRunStatus,
)
from keepgreen.core.ids import PullRequestId, TestRunId
from keepgreen.core.model import ChainLink, QueueEntry
from keepgreen.core.scheduler.effects import (
    Land,
)
from keepgreen.core.scheduler.events import LAND_PR_CLOSED, LAND_PUSHED_TO
from keepgreen.core.scheduler.working import Working

# Landings the worker did not try (`LandRefused`), and how the PR leaves the queue.
_NOT_TRIED = {LAND_PR_CLOSED: StateReason.PR_CLOSED, LAND_PUSHED_TO: StateReason.PUSHED_TO}


class Landing(Working):
    """Land passed entries in order, and take in the landing's result."""

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
        if problem in _NOT_TRIED:
            self.move(entry, PrState.CANCELLED, _NOT_TRIED[problem])
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
