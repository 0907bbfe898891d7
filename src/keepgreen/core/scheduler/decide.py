"""`decide`: one event in, the queue's next state and the effects to carry out.

The scheduler is a reconciler. It applies the event, then recomputes the plan from the state
until nothing changes: admit ready PRs, time out runs, read CI statuses, drop runs whose
predicted branch no longer matches the queue, pass or fail entries, clear entries a passing
successor included (optimistic merge), resolve pending failures (fail, or bisect a batch), land
the front of each lane, and start new runs up to the concurrency. Pure: no I/O, no clock (the
time is `now`), no randomness (run ids are UUIDv5 of the queue id and a counter).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import assert_never

from keepgreen.core.enums import StateReason, TestRunStatus
from keepgreen.core.scheduler.admission import Admission
from keepgreen.core.scheduler.effects import BuildTestCommit
from keepgreen.core.scheduler.events import (
    CiLost,
    EntrySubmitted,
    Event,
    ImpactedTargetsSet,
    Landed,
    LandRefused,
    PrClosed,
    PrHeadMoved,
    PrsRead,
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
from keepgreen.core.scheduler.failures import Failures
from keepgreen.core.scheduler.runs import Runs
from keepgreen.core.scheduler.state import Decision, EngineState, Policy
from keepgreen.core.scheduler.working import test_branch_name

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
    engine = _Engine(state, now=now, policy=policy)
    engine.apply(event)
    engine.reconcile()
    return engine.decision()


class _Engine(Admission, Failures, Runs):
    """The parts together: events in, then rounds of every rule until nothing changes."""

    def apply(self, event: Event) -> None:  # noqa: PLR0912, PLR0915 - one arm per event kind
        match event:
            case Tick() | StatusReported():
                pass
            case EntrySubmitted(entry=entry, new_episode=new_episode, previous_state=previous):
                self.submit(entry, new_episode=new_episode, previous=previous)
            case UserCancelled(number=number, reason=reason):
                self.cancel(number, reason)
            case PrHeadMoved(number=number, head_sha=head_sha):
                found = self.entry_by_number(number)
                # A PR not read yet has no head to move from: the worker's read gives it one.
                if found is not None and found.is_read and found.head_sha != head_sha:
                    self.cancel(number, StateReason.PUSHED_TO)
            case PrsRead(reads=reads):
                for read in reads:
                    self.read(read)
            case PrClosed(number=number, reason=reason):
                self.cancel(number, reason)
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

    def reconcile(self) -> None:
        for _ in range(_MAX_ROUNDS):
            self.changed = False
            self.time_out_not_ready()
            self.admit()
            self.time_out_runs()
            self.read_statuses()
            self.drop_stale_runs()
            self.follow_runs()
            self.rejoin_cleared()
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


__all__ = ["decide", "test_branch_name"]
