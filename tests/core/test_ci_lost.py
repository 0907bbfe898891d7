"""A built-in CI run whose worker died is started again (`ci_lost`), never failed."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from keepgreen.core.enums import CommitState, PrState, StateReason, TestRunStatus
from keepgreen.core.model import QueueConfig
from keepgreen.core.scheduler import (
    CancelCi,
    CiLost,
    Decision,
    EngineState,
    Policy,
    StartCi,
    Tick,
    decide,
)
from keepgreen.core.scheduler.state import BUILT_IN_CI_CONTEXT
from tests.support.builders import T0, make_entry, make_queue, make_run

BUILT_IN = Policy(has_built_in_ci=True)
LATER = T0 + timedelta(hours=4)


def running_state(**run_overrides: object) -> EngineState:
    """PR 1 testing in a run that waits for the built-in CI's status, started at T0."""
    fields: dict[str, object] = {"required_statuses": (BUILT_IN_CI_CONTEXT,), "started_at": T0}
    run = make_run(**{**fields, **run_overrides})
    entry = make_entry(number=1, state=PrState.TESTING, state_reason=StateReason.TESTS_STARTED)
    # No check start timeout: these runs have no status for hours, and this is about the loss.
    queue = make_queue(
        config=QueueConfig(testing_timeout_minutes=300, check_start_timeout_minutes=0)
    )
    return EngineState(queue=queue, entries=(entry,), runs=(run,))


def lost(state: EngineState, *, policy: Policy = BUILT_IN) -> Decision:
    return decide(state, CiLost(state.runs[0].id), now=LATER, policy=policy)


def test_a_lost_run_starts_again_with_a_fresh_timeout_and_ci_lost_in_the_history() -> None:
    """The worker running PR 1's CI died 4 hours into a 5-hour timeout. The run starts again
    (same run, same test commit) and its timeout counts from now: an hour later it has not
    timed out. PR 1 stays testing; its history says why the run started again.
    """
    state = running_state()
    run = state.runs[0]

    decision = lost(state)

    assert decision.effects == (StartCi(run.id, run.sha or "", 300 * 60),)
    [restarted] = decision.state.runs
    assert restarted.status is TestRunStatus.IN_PROGRESS
    assert restarted.started_at == LATER
    [entry] = decision.state.entries
    assert entry.state is PrState.TESTING
    assert [(c.from_state, c.to_state, c.reason, c.test_run_id) for c in decision.changes] == [
        (PrState.TESTING, PrState.TESTING, StateReason.CI_LOST, run.id)
    ]
    later = decide(decision.state, Tick(), now=LATER + timedelta(hours=1), policy=BUILT_IN)
    assert later.state.runs[0].status is TestRunStatus.IN_PROGRESS


def test_a_loss_reported_twice_starts_the_run_once() -> None:
    """The start decided for the first report is still in the outbox: the second does nothing."""
    first = lost(running_state())
    second = decide(first.state, CiLost(first.state.runs[0].id), now=LATER, policy=BUILT_IN)
    assert second.effects == ()
    assert second.changes == ()


def test_a_run_whose_ci_already_reported_is_not_lost() -> None:
    """The command finished and reported before its worker died: the report decides."""
    state = running_state()
    sha = state.runs[0].sha or ""
    for reported in (CommitState.SUCCESS, CommitState.FAILURE, CommitState.ERROR):
        with_status = replace(state, statuses={sha: {BUILT_IN_CI_CONTEXT: reported}})
        decision = lost(with_status)
        assert not any(isinstance(e, StartCi) for e in decision.effects)
        assert StateReason.CI_LOST not in [c.reason for c in decision.changes]


def test_a_pending_status_from_the_dead_run_does_not_stop_the_restart() -> None:
    state = running_state()
    sha = state.runs[0].sha or ""
    decision = lost(replace(state, statuses={sha: {BUILT_IN_CI_CONTEXT: CommitState.PENDING}}))
    assert [type(e) for e in decision.effects] == [StartCi]


def test_external_ci_runs_are_never_lost() -> None:
    """A repository without a CI command: its CI lives elsewhere, no worker can lose it."""
    state = running_state(required_statuses=("ci",))
    for policy in (Policy(has_built_in_ci=False), BUILT_IN):
        decision = lost(state, policy=policy)
        assert decision.effects == ()
        assert decision.changes == ()


def test_a_run_being_cancelled_or_not_built_is_not_restarted() -> None:
    state = running_state()
    cancelling = replace(state, in_flight=(CancelCi(state.runs[0].id),))
    assert lost(cancelling).effects == ()
    unbuilt = running_state(sha=None)
    assert lost(unbuilt).effects == ()
