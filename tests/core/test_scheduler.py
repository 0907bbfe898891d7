"""The merge queue scheduler, scenario by scenario, on a simulated code host and CI.

Each test reads like the paragraph of the queue's documented behaviour it checks: PRs are
submitted to a `SimulatedWorld` (PR N's change is the number N; a "bad" PR fails every test run
whose tree holds it), virtual time passes until the queue settles, and the test asserts the final
states and reasons, the order PRs landed in and the trees that landed. A test run's tree is the
target tip plus the PRs merged onto it, so `builds` lists each run as the PR numbers it merged.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from keepgreen.core.enums import (
    CommitState,
    DirectMergeMode,
    Mergeability,
    OptimizationMode,
    PrState,
    QueueMode,
    QueueState,
    StateReason,
    TestRunKind,
)
from keepgreen.core.ids import PullRequestId
from keepgreen.core.model import QueueConfig, Readiness
from keepgreen.core.priority import priority_from_name
from keepgreen.core.scheduler import (
    BuildTestCommit,
    Event,
    ImpactedTargetsSet,
    PrHeadMoved,
    QueueConfigChanged,
    ReadinessChanged,
    RestartRequested,
    UserCancelled,
)
from keepgreen.core.scheduler.effects import Effect
from keepgreen.simulation.world import CI_CONTEXT, SimulatedWorld

MERGED, FAILED, CANCELLED = PrState.MERGED, PrState.FAILED, PrState.CANCELLED
PENDING, TESTING, NOT_READY = PrState.PENDING, PrState.TESTING, PrState.NOT_READY
URGENT, HIGH = priority_from_name("urgent"), priority_from_name("high")
CI_MINUTES = 10  # the world's CI answers 600 s after a test commit is built


@dataclass(frozen=True)
class Build:
    """One `BuildTestCommit` as carried out: what it merged, for which kind of run, when."""

    prs: tuple[int, ...]
    tested: tuple[int, ...]
    kind: TestRunKind
    base_sha: str
    at: datetime


@dataclass
class Watch:
    """Records the effects the world carries out."""

    world: SimulatedWorld
    builds: list[Build] = field(default_factory=list)

    def __call__(self, effect: Effect) -> None:
        if isinstance(effect, BuildTestCommit):
            run = next((r for r in self.world.state.runs if r.id == effect.run_id), None)
            if run is None:
                return  # abandoned before the world got to it: building it changes nothing
            numbers = {e.id: e.number for e in self.world.state.entries}
            self.builds.append(
                Build(
                    prs=tuple(number for number, _ in effect.prs),
                    tested=tuple(numbers[t] for t in run.tested_prs),
                    kind=run.kind,
                    base_sha=effect.base_sha,
                    at=self.world.now,
                )
            )

    @property
    def built(self) -> list[tuple[int, ...]]:
        return [b.prs for b in self.builds]


def world(*, mode: QueueMode = QueueMode.SINGLE, **config: Any) -> tuple[SimulatedWorld, Watch]:
    """A world for one queue with this configuration, its effects watched."""
    sim = SimulatedWorld(config=QueueConfig(**config), mode=mode)
    watch = Watch(sim)
    sim.on_effect = watch
    return sim, watch


def submit(sim: SimulatedWorld, *numbers: int) -> None:
    for number in numbers:
        sim.submit(number)
    sim.run_effects()


def landed(sim: SimulatedWorld) -> list[int]:
    """PR numbers in the order they landed on the target branch."""
    return [landing.number for landing in sim.landings]


def reasons_of(sim: SimulatedWorld, number: int) -> list[tuple[PrState, StateReason]]:
    """PR `number`'s history: (new state, reason), oldest first."""
    pr = PullRequestId(f"pr-{number}")
    return [(c.to_state, c.reason) for c in sim.history if c.pull_request_id == pr]


def set_queue(sim: SimulatedWorld, **changes: Any) -> None:
    """`updateQueue`: change the queue's state, mode or configuration."""
    sim.feed(QueueConfigChanged(replace(sim.state.queue, **changes)))
    sim.run_effects()


def config_of(sim: SimulatedWorld, **changes: Any) -> QueueConfig:
    return replace(sim.state.queue.config, **changes)


def feed(sim: SimulatedWorld, *events: Event) -> None:
    for event in events:
        sim.feed(event)
    sim.run_effects()


def assert_only_tested_trees_landed(sim: SimulatedWorld) -> None:
    """Each landing adds one PR; in single mode the branch becomes exactly the tested tree (in
    parallel mode the tested change lands on a tip that may hold other lanes' changes).
    """
    for landing in sim.landings:
        assert landing.after == landing.before | {landing.number}
        if landing.tested is not None:
            assert landing.number in landing.tested
            if sim.state.queue.mode is QueueMode.SINGLE:
                assert landing.after == landing.tested


# -- failures are isolated --------------------------------------------------------------------


def test_a_bad_pr_fails_and_the_prs_around_it_merge() -> None:
    """A, B and C are queued and B breaks the build: A merges, B fails with `tests_failed`, and
    C is tested again without B and merges. B's change never reaches the target branch.
    """
    sim, _ = world()
    sim.bad = {2}
    submit(sim, 1, 2, 3)
    sim.settle()

    assert sim.states() == {1: MERGED, 2: FAILED, 3: MERGED}
    assert sim.reasons() == {
        1: StateReason.MERGED_BY_QUEUE,
        2: StateReason.TESTS_FAILED,
        3: StateReason.MERGED_BY_QUEUE,
    }
    assert landed(sim) == [1, 3]
    assert sim.main == {1, 3}
    assert all(2 not in landing.after for landing in sim.landings)
    assert_only_tested_trees_landed(sim)


def test_concurrency_tests_predicted_branches_at_once() -> None:
    """With concurrency 3, A, B and C are tested at the same time, each on the branch it will
    land on: A, A+B and A+B+C.
    """
    sim, watch = world(concurrency=3)
    submit(sim, 1, 2, 3)

    assert watch.built == [(1,), (1, 2), (1, 2, 3)]
    assert len({b.at for b in watch.builds}) == 1
    assert sim.states() == {1: TESTING, 2: TESTING, 3: TESTING}

    sim.settle()
    assert landed(sim) == [1, 2, 3]
    assert len(watch.builds) == 3  # every run passed: nothing was tested twice
    assert_only_tested_trees_landed(sim)


def test_a_failed_batch_is_bisected_and_the_good_prs_merge() -> None:
    """A batch of four in which PR 3 is bad fails; it is split in halves (1+2, and 3+4 tested on
    top of 1+2), then 3+4 in halves again, until 3 alone is found guilty. 1, 2 and 4 merge.
    """
    sim, watch = world(batch=True, batching_min_size=4, bisect_beside_queue=False)
    sim.bad = {3}
    submit(sim, 1, 2, 3, 4)
    sim.settle()

    assert sim.states() == {1: MERGED, 2: MERGED, 3: FAILED, 4: MERGED}
    assert sim.reasons()[3] is StateReason.TESTS_FAILED
    assert landed(sim) == [1, 2, 4]
    assert 3 not in sim.main
    assert watch.builds[0].prs == (1, 2, 3, 4)
    assert watch.builds[0].kind is TestRunKind.MAIN
    assert [(b.prs, b.tested) for b in watch.builds[1:3]] == [
        ((1, 2), (1, 2)),
        ((1, 2, 3, 4), (3, 4)),
    ]
    assert {b.kind for b in watch.builds[1:]} == {TestRunKind.BISECTION}
    for number in (1, 2, 3, 4):
        assert (PENDING, StateReason.BISECTING) in reasons_of(sim, number)
    assert_only_tested_trees_landed(sim)


def test_bisection_skips_a_set_that_already_failed() -> None:
    """With `bisection_skip_redundant_tests`, 3+4 on top of 1+2 is the very batch that failed:
    it is not tested again but split at once, which saves a run.
    """
    plain, plain_watch = world(batch=True, batching_min_size=4, bisect_beside_queue=False)
    skipping, watch = world(
        batch=True,
        batching_min_size=4,
        bisect_beside_queue=False,
        optimization_mode=OptimizationMode.BISECTION_SKIP_REDUNDANT_TESTS,
    )
    for sim in (plain, skipping):
        sim.bad = {3}
        submit(sim, 1, 2, 3, 4)
        sim.settle()
        assert sim.states() == {1: MERGED, 2: MERGED, 3: FAILED, 4: MERGED}
        assert landed(sim) == [1, 2, 4]

    assert (1, 2, 3, 4) not in watch.built[1:]
    assert len(watch.builds) == len(plain_watch.builds) - 1
    assert (PrState.PENDING_FAILURE, StateReason.TEST_RUN_FAILED_BY_OPTIMIZATION) in reasons_of(
        skipping, 4
    )


def test_bisection_fails_a_lone_pr_whose_failure_is_already_known() -> None:
    """Batch 1+2 fails because of 2; bisected, 1 passes and 2 is tested on top of 1: the set
    1+2 failed already, but a PR with a run ahead of it is still tested (never failed blindly).
    """
    sim, watch = world(
        batch=True,
        batching_min_size=2,
        optimization_mode=OptimizationMode.BISECTION_SKIP_REDUNDANT_TESTS,
        bisect_beside_queue=False,
    )
    sim.bad = {2}
    submit(sim, 1, 2)
    sim.settle()

    assert sim.states() == {1: MERGED, 2: FAILED}
    assert sim.reasons()[2] is StateReason.TESTS_FAILED
    assert sim.main == {1}
    assert watch.built[0] == (1, 2)


# -- flaky failures: pending failure depth and optimistic merge ---------------------------------


def test_a_flaky_failure_is_forgiven_when_a_successor_passes() -> None:
    """PR 1's first run fails by chance. With `pendingFailureDepth` 1 it waits in
    `pending_failure` for the run behind it; that run (1+2) passes, and with optimistic merging
    it vouches for 1: both merge, 1 with the tree 1+2's run tested for it.
    """
    sim, _ = world(concurrency=2, pending_failure_depth=1, can_optimistically_merge=True)
    sim.fail_once = {1}
    submit(sim, 1, 2)
    sim.settle()

    assert sim.states() == {1: MERGED, 2: MERGED}
    history = reasons_of(sim, 1)
    assert (PrState.PENDING_FAILURE, StateReason.TESTS_FAILED) in history
    assert (PrState.TESTS_PASSED, StateReason.CLEARED_BY_SUCCESSOR) in history
    assert landed(sim) == [1, 2]
    assert sim.landings[0].after == {1}
    assert_only_tested_trees_landed(sim)


def test_without_pending_failure_depth_a_flaky_failure_fails_the_pr() -> None:
    """Same flake with `pendingFailureDepth` 0: PR 1 fails at once and 2 is tested again alone."""
    sim, watch = world(concurrency=2, pending_failure_depth=0, can_optimistically_merge=True)
    sim.fail_once = {1}
    submit(sim, 1, 2)
    sim.settle()

    assert sim.states() == {1: FAILED, 2: MERGED}
    assert sim.reasons()[1] is StateReason.TESTS_FAILED
    assert watch.built == [(1,), (1, 2), (2,)]
    assert sim.main == {2}


def test_without_optimistic_merge_a_passing_successor_does_not_clear_a_failure() -> None:
    """Depth 1 without optimistic merging: PR 1 waits for its successor, but the successor's
    pass does not vouch for it; 1 fails and 2 is tested again without it.
    """
    sim, _ = world(concurrency=2, pending_failure_depth=1, can_optimistically_merge=False)
    sim.fail_once = {1}
    submit(sim, 1, 2)
    sim.settle()

    assert sim.states() == {1: FAILED, 2: MERGED}
    assert sim.main == {2}


def test_a_bad_pr_waiting_for_its_successor_fails_and_the_successor_is_re_tested() -> None:
    """`pendingFailureDepth` 1 with a really bad PR 1: 2 is tested on top of it and fails too.
    Once 2's run is over, 1 is found guilty and 2 is tested again without it.
    """
    sim, watch = world(pending_failure_depth=1)
    sim.bad = {1}
    submit(sim, 1, 2)
    sim.settle()

    assert sim.states() == {1: FAILED, 2: MERGED}
    assert watch.built == [(1,), (1, 2), (2,)]
    assert sim.main == {2}


def test_a_pass_on_top_of_a_pr_that_then_fails_does_not_land() -> None:
    """Parallel lane, depth 1, no optimistic merge: PR 1 fails by chance, 2 passes on top of it,
    then 1 is failed. 2's pass was for a tree holding 1: 2 is tested again and lands alone,
    never with the tree it was not tested in.
    """
    sim, watch = world(mode=QueueMode.PARALLEL, pending_failure_depth=1)
    sim.fail_once = {1}
    sim.submit(1, targets=("a",))
    sim.submit(2, targets=("a",))
    sim.settle()

    assert sim.states() == {1: FAILED, 2: MERGED}
    assert sim.reasons()[2] is StateReason.MERGED_BY_QUEUE
    assert watch.built == [(1,), (1, 2), (2,)]
    assert sim.landings[0].tested == frozenset({2})


# -- parallel mode --------------------------------------------------------------------------------


def test_parallel_lanes_are_tested_independently() -> None:
    """In parallel mode PRs with disjoint impacted targets are in separate lanes: 1 ("a") and
    2 ("b") are tested at the same time, neither on top of the other. 3 impacts ALL: it is
    tested on top of both, and 4 ("a") comes after 3 and so after everything. 5 impacts nothing
    (an empty list): it depends on nothing and is tested alone.
    """
    sim, watch = world(mode=QueueMode.PARALLEL, concurrency=5)
    sim.submit(1, targets=("a",))
    sim.submit(2, targets=("b",))
    sim.submit(3, targets=None)
    sim.submit(4, targets=("a",))
    sim.submit(5, targets=())
    sim.run_effects()

    assert watch.built == [(1,), (2,), (1, 2, 3), (1, 2, 3, 4), (5,)]
    sim.settle()
    assert set(sim.states().values()) == {MERGED}
    assert sim.main == {1, 2, 3, 4, 5}
    assert landed(sim).index(3) > max(landed(sim).index(1), landed(sim).index(2))
    assert landed(sim).index(4) > landed(sim).index(3)
    assert_only_tested_trees_landed(sim)


def test_a_bad_pr_in_one_lane_does_not_hold_up_the_other() -> None:
    """Lane "a" has a bad PR; lane "b" merges without waiting for it to be sorted out."""
    sim, watch = world(mode=QueueMode.PARALLEL, concurrency=4)
    sim.bad = {1}
    sim.submit(1, targets=("a",))
    sim.submit(2, targets=("b",))
    sim.submit(3, targets=("a", "c"))
    sim.run_effects()
    assert watch.built == [(1,), (2,), (1, 3)]

    sim.settle()
    assert sim.states() == {1: FAILED, 2: MERGED, 3: MERGED}
    assert sim.main == {2, 3}
    assert_only_tested_trees_landed(sim)


def test_a_pr_ahead_that_no_longer_merges_is_blamed_not_the_pr_behind_it() -> None:
    """Parallel mode: 2 ("a") passed its tests on the old tip, but 1 ("c", another lane) landed
    meanwhile and 2 conflicts with it. 3, tested on top of 2 on the new tip, cannot even be
    built. 2 is tested again on the new tip and fails with `merge_conflict`; 3 is not to blame
    and merges.
    """
    sim, _ = world(mode=QueueMode.PARALLEL, concurrency=3)
    sim.conflicts = {frozenset({1, 2})}
    sim.ci_seconds = 60
    sim.submit(1, targets=("c",))
    sim.run_effects()
    sim.ci_seconds = 20 * 60
    sim.submit(2, targets=("a",))
    sim.run_effects()
    sim.step()
    assert sim.states()[1] is MERGED
    sim.submit(3, targets=("a",))
    sim.settle()

    assert sim.states() == {1: MERGED, 2: FAILED, 3: MERGED}
    assert sim.reasons()[2] is StateReason.MERGE_CONFLICT
    assert sim.main == {1, 3}


def test_a_pr_behind_two_conflicting_lanes_waits_instead_of_failing() -> None:
    """1 ("a") and 2 ("b") claim disjoint targets but change the same lines. Each passes alone;
    3 impacts ALL, so its branch holds both and cannot be built. That is not 3's fault: it
    waits. 1 lands, 2 no longer applies (`merge_refused`), and 3 is tested again and merges.
    """
    sim, _ = world(mode=QueueMode.PARALLEL, concurrency=3)
    sim.conflicts = {frozenset({1, 2})}
    sim.submit(1, targets=("a",))
    sim.submit(2, targets=("b",))
    sim.submit(3, targets=None)
    sim.settle()

    assert sim.states() == {1: MERGED, 2: FAILED, 3: MERGED}
    assert sim.reasons()[2] is StateReason.MERGE_REFUSED
    assert (PrState.PENDING_FAILURE, StateReason.PREDECESSOR_CHANGED) in reasons_of(sim, 3)
    assert sim.main == {1, 3}


def test_parallel_mode_waits_for_impacted_targets() -> None:
    """A PR without impacted targets stays `not_ready` in parallel mode."""
    sim, watch = world(mode=QueueMode.PARALLEL)
    sim.submit(1)
    sim.settle(limit_steps=5)
    assert sim.states() == {1: NOT_READY}
    assert watch.builds == []


# -- priorities ---------------------------------------------------------------------------------


def test_an_urgent_pr_preempts_the_prs_being_tested() -> None:
    """Concurrency 2: A and B are testing, C pending. Urgent D is tested at once; A is restarted
    on top of D (`preempted`), B goes back to `pending`. They land D, A, B, C.
    """
    sim, watch = world(concurrency=2)
    submit(sim, 1, 2, 3)
    assert sim.states() == {1: TESTING, 2: TESTING, 3: PENDING}

    sim.submit(4, priority=URGENT)
    sim.run_effects()
    assert watch.built[2:] == [(4,), (4, 1)]
    assert sim.states() == {1: TESTING, 2: PENDING, 3: PENDING, 4: TESTING}
    assert (PENDING, StateReason.PREEMPTED) in reasons_of(sim, 1)
    assert reasons_of(sim, 2)[-1] == (PENDING, StateReason.PREEMPTED)

    sim.settle()
    assert landed(sim) == [4, 1, 2, 3]
    assert_only_tested_trees_landed(sim)


def test_a_high_priority_pr_only_reorders_the_waiting_prs() -> None:
    """A high (not urgent) priority restarts nothing: it goes ahead of the PRs still waiting."""
    sim, watch = world(concurrency=2)
    submit(sim, 1, 2, 3)
    sim.submit(4, priority=HIGH)
    sim.run_effects()

    assert watch.built == [(1,), (1, 2)]
    assert sim.states() == {1: TESTING, 2: TESTING, 3: PENDING, 4: PENDING}
    sim.settle()
    assert all(c.reason is not StateReason.PREEMPTED for c in sim.history)
    assert landed(sim) == [1, 2, 4, 3]
    assert [b.tested for b in watch.builds] == [(1,), (2,), (4,), (3,)]
    assert len(watch.builds) == 4  # once placed ahead, 4 stays ahead: no run was redone


def test_a_pr_that_became_ready_late_is_placed_behind_the_prs_testing() -> None:
    """PR 1 was submitted first but became ready after 2 started testing: it is tested on top of
    2, and stays there (it is not moved ahead of 2 for its earlier submission).
    """
    sim, watch = world(concurrency=2)
    sim.submit(1, ready=False)
    submit(sim, 2)
    feed(sim, ready_and_up_to_date(sim, 1, up_to_date=False))

    assert watch.built == [(2,), (2, 1)]
    sim.settle()
    assert landed(sim) == [2, 1]
    assert len(watch.builds) == 2


# -- queue states -------------------------------------------------------------------------------


def test_a_paused_queue_starts_and_lands_nothing_until_resumed() -> None:
    """Paused: the run already testing finishes, but nothing lands, no new run starts and no new
    PR is admitted. Resumed, the queue carries on in order.
    """
    sim, watch = world()
    submit(sim, 1, 2)
    set_queue(sim, state=QueueState.PAUSED)
    sim.submit(3)
    for _ in range(3 * CI_MINUTES):
        sim.step()

    assert sim.states() == {1: PrState.TESTS_PASSED, 2: PENDING, 3: NOT_READY}
    assert sim.landings == []
    assert watch.built == [(1,)]

    set_queue(sim, state=QueueState.RUNNING)
    sim.settle()
    assert landed(sim) == [1, 2, 3]


def test_a_pr_not_ready_for_the_timeout_leaves_and_one_held_by_a_paused_queue_stays() -> None:
    """notReadyTimeoutHours 1: PR 2, which the code host never calls mergeable, is cancelled
    (`not_ready_timeout`) an hour after it was submitted, not a minute before; PR 3, ready but
    held back by the paused queue, stays; PR 1 is tested and merged meanwhile.
    """
    sim, _ = world(not_ready_timeout_hours=1)
    submit(sim, 1)
    sim.submit(2, ready=False)
    for _ in range(59):
        sim.step()
    assert sim.states()[2] is NOT_READY
    set_queue(sim, state=QueueState.PAUSED)
    sim.submit(3)
    sim.step()
    assert sim.states()[2] is CANCELLED
    assert reasons_of(sim, 2)[-1] == (CANCELLED, StateReason.NOT_READY_TIMEOUT)
    for _ in range(120):
        sim.step()
    assert sim.states()[3] is NOT_READY
    assert landed(sim) == [1]


def test_without_a_not_ready_timeout_a_pr_waits_not_ready_for_days() -> None:
    sim, _ = world()
    sim.submit(2, ready=False)
    sim.step(seconds=3 * 86400)
    assert sim.states() == {2: NOT_READY}


def test_a_draining_queue_admits_nothing_and_finishes_the_rest() -> None:
    """Draining: PRs already queued are tested and merged; a new PR waits in `not_ready`."""
    sim, _ = world()
    submit(sim, 1, 2)
    set_queue(sim, state=QueueState.DRAINING)
    sim.submit(3)
    sim.settle(limit_steps=100)

    assert sim.states() == {1: MERGED, 2: MERGED, 3: NOT_READY}
    assert landed(sim) == [1, 2]


def test_switching_modes_finishes_the_queue_then_runs_in_the_new_mode() -> None:
    """Switching from single to parallel mode with PRs queued: the queue is `switching_modes`
    (like draining) until they merge, then runs in parallel mode and admits the PR that waited.
    """
    sim, watch = world()
    submit(sim, 1, 2)
    set_queue(sim, state=QueueState.SWITCHING_MODES, pending_mode=QueueMode.PARALLEL)
    sim.submit(3, targets=("a",))
    sim.submit(4, targets=("b",))
    sim.run_effects()
    assert sim.states()[3] is NOT_READY

    sim.settle()
    assert sim.state.queue.state is QueueState.RUNNING
    assert sim.state.queue.mode is QueueMode.PARALLEL
    assert sim.state.queue.pending_mode is None
    assert landed(sim)[:2] == [1, 2]
    assert sim.main == {1, 2, 3, 4}
    assert (3,) in watch.built
    assert (4,) in watch.built  # separate lanes: 4 is not tested on top of 3


# -- PRs leaving the queue ----------------------------------------------------------------------


def test_cancelling_a_pr_restarts_the_runs_that_included_it() -> None:
    """A, B and C are testing; B is cancelled. A's run goes on; C's run held B, so C is tested
    again on top of A alone.
    """
    sim, watch = world(concurrency=3)
    submit(sim, 1, 2, 3)
    feed(sim, UserCancelled(2))

    assert sim.states() == {1: TESTING, 2: CANCELLED, 3: TESTING}
    assert sim.reasons()[2] is StateReason.CANCELED_BY_USER
    assert (PENDING, StateReason.PREDECESSOR_CHANGED) in reasons_of(sim, 3)
    assert watch.built == [(1,), (1, 2), (1, 2, 3), (1, 3)]
    assert (PENDING, StateReason.PREDECESSOR_CHANGED) not in reasons_of(sim, 1)

    sim.settle()
    assert landed(sim) == [1, 3]
    assert sim.main == {1, 3}


def test_pushing_to_a_queued_pr_cancels_it() -> None:
    """New commits on a queued PR take it out of the queue (`pushed_to`); its old head is never
    merged. A report of the head it already has changes nothing.
    """
    sim, _ = world(concurrency=2)
    submit(sim, 1, 2)
    feed(sim, PrHeadMoved(1, sim.head_sha(1)))
    assert sim.states() == {1: TESTING, 2: TESTING}

    feed(sim, PrHeadMoved(1, "h1-amended"))
    assert sim.states()[1] is CANCELLED
    assert sim.reasons()[1] is StateReason.PUSHED_TO

    sim.settle()
    assert sim.states() == {1: CANCELLED, 2: MERGED}
    assert sim.main == {2}


def test_a_pr_that_conflicts_with_the_one_ahead_fails_with_merge_conflict() -> None:
    """1 and 2 change the same lines: 2's test commit cannot be built on top of 1. 1 merges and
    2 fails with `merge_conflict`.
    """
    sim, _ = world(concurrency=2)
    sim.conflicts = {frozenset({1, 2})}
    submit(sim, 1, 2)
    sim.settle()

    assert sim.states() == {1: MERGED, 2: FAILED}
    assert sim.reasons()[2] is StateReason.MERGE_CONFLICT
    assert sim.main == {1}


def test_restart_re_tests_a_pr_without_moving_it_or_its_successors() -> None:
    """Restarting B's tests abandons B's run and starts a new one on the same branch; B keeps its
    place, and C, tested on top of B, is not re-tested.
    """
    sim, watch = world(concurrency=3)
    submit(sim, 1, 2, 3)
    sim.step()
    feed(sim, RestartRequested(2))

    assert watch.built == [(1,), (1, 2), (1, 2, 3), (1, 2)]
    assert reasons_of(sim, 2)[-2:] == [
        (PENDING, StateReason.RESTART_REQUESTED),
        (TESTING, StateReason.TESTS_STARTED),
    ]
    assert all(state is not PENDING for state, _ in reasons_of(sim, 3)[2:])

    sim.settle()
    assert landed(sim) == [1, 2, 3]


def test_a_restarted_pr_does_not_jump_ahead_of_prs_sent_back_before_it() -> None:
    """2 conflicts with 1, so the runs of 2, 3 and 4 (all on top of 1+2) fail to build. 4 is
    restarted while 1 is still testing; then 1 fails, and 2 and 3 go back to `pending` too: they
    are tested again in their order, 2, 3, 4, and land in that order.
    """
    sim, watch = world(concurrency=4)
    sim.bad = {1}
    sim.conflicts = {frozenset({1, 2})}
    submit(sim, 1, 2, 3, 4)
    assert sim.states() == {
        1: TESTING,
        2: PrState.PENDING_FAILURE,
        3: PrState.PENDING_FAILURE,
        4: PrState.PENDING_FAILURE,
    }
    feed(sim, RestartRequested(4))
    sim.settle()

    assert sim.states() == {1: FAILED, 2: MERGED, 3: MERGED, 4: MERGED}
    assert watch.built[-3:] == [(2,), (2, 3), (2, 3, 4)]
    assert landed(sim) == [2, 3, 4]


def test_restart_of_a_pending_failure_retries_it_at_once() -> None:
    """PR 1 failed by chance and waits for its successor (depth 1): a restart re-tests it now."""
    sim, watch = world(concurrency=2, pending_failure_depth=1, can_optimistically_merge=False)
    sim.fail_once = {1}
    sim.ci_seconds = 60 * 60
    submit(sim, 1)
    sim.ci_seconds = 3 * 60 * 60  # 2's run answers much later
    submit(sim, 2)
    for _ in range(61):
        sim.step()
    assert sim.states()[1] is PrState.PENDING_FAILURE

    sim.ci_seconds = 60
    feed(sim, RestartRequested(1))
    assert sim.states()[1] is TESTING
    assert watch.built[-1] == (1,)
    sim.settle()
    assert sim.states() == {1: MERGED, 2: MERGED}
    assert landed(sim) == [1, 2]


def test_restart_of_a_pr_that_is_not_being_tested_is_ignored() -> None:
    sim, watch = world()
    submit(sim, 1, 2)
    feed(sim, RestartRequested(2), RestartRequested(99))
    assert sim.states() == {1: TESTING, 2: PENDING}
    assert watch.built == [(1,)]


# -- direct merge ---------------------------------------------------------------------------------


def ready_and_up_to_date(
    sim: SimulatedWorld, number: int, *, up_to_date: bool = True
) -> ReadinessChanged:
    """The code host now calls PR `number` mergeable (and based on the tip, or not)."""
    readiness = Readiness(
        does_base_branch_match=True,
        mergeability=Mergeability.MERGEABLE,
        requires_impacted_targets=False,
        has_impacted_targets=False,
    )
    return ReadinessChanged(number, readiness, is_up_to_date=up_to_date)


def test_an_up_to_date_pr_merges_directly_into_an_empty_queue() -> None:
    """Direct merge: PR 1 is based on the tip, its own checks are green and the queue is empty:
    it lands at once (`merged_directly`) without a test run.
    """
    sim, watch = world(direct_merge_mode=DirectMergeMode.ALWAYS)
    sim.statuses[sim.head_sha(1)] = {CI_CONTEXT: CommitState.SUCCESS}
    sim.submit(1, ready=False)
    assert sim.states() == {1: NOT_READY}
    feed(sim, ready_and_up_to_date(sim, 1))

    assert sim.states() == {1: MERGED}
    assert sim.reasons()[1] is StateReason.MERGED_DIRECTLY
    assert watch.builds == []
    assert sim.landings[0].tested is None
    assert sim.main == {1}


def test_direct_merge_needs_the_prs_own_checks_green() -> None:
    sim, watch = world(direct_merge_mode=DirectMergeMode.ALWAYS)
    sim.statuses[sim.head_sha(1)] = {CI_CONTEXT: CommitState.FAILURE}
    sim.submit(1, ready=False)
    feed(sim, ready_and_up_to_date(sim, 1))
    assert watch.built == [(1,)]
    sim.settle()
    assert sim.reasons()[1] is StateReason.MERGED_BY_QUEUE


def test_a_pr_behind_another_is_tested_not_merged_directly() -> None:
    """Two up-to-date PRs with green checks: the first merges directly into the empty queue; the
    second is then not alone (the first is landing ahead of it), so it is tested on top of the
    first. The two conflict: the second fails instead of landing an untested combination.
    """
    sim, watch = world(direct_merge_mode=DirectMergeMode.ALWAYS, concurrency=2)
    sim.conflicts = {frozenset({1, 2})}
    for number in (1, 2):
        sim.statuses[sim.head_sha(number)] = {CI_CONTEXT: CommitState.SUCCESS}
        sim.submit(number, ready=False)
    feed(sim, ready_and_up_to_date(sim, 1), ready_and_up_to_date(sim, 2))
    sim.settle()

    assert watch.built == [(1, 2)]
    assert sim.states() == {1: MERGED, 2: FAILED}
    assert sim.reasons() == {1: StateReason.MERGED_DIRECTLY, 2: StateReason.MERGE_CONFLICT}
    assert sim.main == {1}


def test_a_pr_is_no_longer_up_to_date_once_the_branch_moves() -> None:
    """PR 2 was up to date when submitted, but PR 1 landed since: when 2 enters the queue (its
    impacted targets arrive) it is tested on the new tip rather than merged directly.
    """
    sim, watch = world(mode=QueueMode.PARALLEL, direct_merge_mode=DirectMergeMode.ALWAYS)
    sim.submit(1, targets=("a",))
    sim.statuses[sim.head_sha(2)] = {CI_CONTEXT: CommitState.SUCCESS}
    sim.submit(2, up_to_date=True)  # no impacted targets yet: not_ready
    sim.settle(limit_steps=CI_MINUTES + 1)
    assert sim.states() == {1: MERGED, 2: NOT_READY}

    feed(sim, ImpactedTargetsSet(2, sim.head_sha(2), ("b",)))
    assert watch.built == [(1,), (2,)]
    sim.settle()
    assert sim.reasons()[2] is StateReason.MERGED_BY_QUEUE
    assert sim.landings[1].tested == frozenset({1, 2})


# -- time limits and the target branch ----------------------------------------------------------


def test_a_run_that_ci_never_answers_times_out() -> None:
    """CI never reports: after `testingTimeoutMinutes` the run fails and the PR with it
    (`test_run_timeout`); the PR behind it is then tested without it.
    """
    sim, _ = world(testing_timeout_minutes=30)
    sim.ci_seconds = 10**9
    submit(sim, 1)
    sim.ci_seconds = 600
    submit(sim, 2)
    sim.settle()

    assert sim.states() == {1: FAILED, 2: MERGED}
    assert sim.reasons()[1] is StateReason.TEST_RUN_TIMEOUT
    assert sim.main == {2}


def test_a_foreign_push_to_the_target_branch_restarts_the_runs() -> None:
    """Someone pushes to the target branch behind the queue's back: every run is tested again on
    the new tip, and the foreign change stays on the branch.
    """
    sim, watch = world(concurrency=2)
    submit(sim, 1, 2)
    sim.step()
    sim.push_to_target(-1)
    sim.run_effects()

    for number in (1, 2):
        assert (PENDING, StateReason.TARGET_BRANCH_MOVED) in reasons_of(sim, number)
    assert [b.base_sha for b in watch.builds[2:]] == [sim.tip, sim.tip]

    sim.settle()
    assert landed(sim) == [1, 2]
    assert sim.main == {-1, 1, 2}
    assert sim.landings[0].tested == frozenset({-1, 1})
    assert_only_tested_trees_landed(sim)


def test_a_queue_without_required_statuses_fails_its_prs() -> None:
    """No required statuses (none configured, no built-in CI): nothing could ever pass, so a PR
    fails with `no_required_statuses` instead of waiting forever.
    """
    sim, watch = world()
    set_queue(sim, config=config_of(sim, required_statuses=()))
    submit(sim, 1)

    assert sim.states() == {1: FAILED}
    assert sim.reasons()[1] is StateReason.NO_REQUIRED_STATUSES
    assert watch.builds == []


# -- batching -----------------------------------------------------------------------------------


def test_a_batch_waits_for_its_size_then_tests_smaller_after_the_wait() -> None:
    """Batch size 4, wait 5 minutes: with three PRs queued nothing is tested at first; after the
    wait the three are tested together as one batch and land one by one.
    """
    sim, watch = world(batch=True, batching_min_size=4, batching_max_wait_time_minutes=5)
    submit(sim, 1, 2, 3)
    for _ in range(4):
        sim.step()
    assert watch.builds == []
    assert sim.states() == {1: PENDING, 2: PENDING, 3: PENDING}

    sim.step()
    assert watch.built == [(1, 2, 3)]
    sim.settle()
    assert landed(sim) == [1, 2, 3]
    assert len(watch.builds) == 1
    assert_only_tested_trees_landed(sim)


def test_a_full_batch_is_tested_at_once() -> None:
    sim, watch = world(batch=True, batching_min_size=2, concurrency=2)
    submit(sim, 1, 2, 3, 4)
    assert watch.built == [(1, 2), (1, 2, 3, 4)]
    assert [b.tested for b in watch.builds] == [(1, 2), (3, 4)]


def test_a_no_batch_pr_is_tested_alone() -> None:
    """`noBatch`: PRs 1 and 4 are tested alone, in their places; 2 and 3 form a batch between
    them, and 5, left without a partner, is tested alone once the batching wait is over.
    """
    sim, watch = world(batch=True, batching_min_size=2, concurrency=4)
    sim.submit(1, no_batch=True)
    sim.submit(2)
    sim.submit(3)
    sim.submit(4, no_batch=True)
    sim.submit(5)
    sim.run_effects()

    assert [(b.prs, b.tested) for b in watch.builds] == [
        ((1,), (1,)),
        ((1, 2, 3), (2, 3)),
        ((1, 2, 3, 4), (4,)),
    ]
    sim.settle()
    assert watch.builds[3].tested == (5,)
    assert landed(sim) == [1, 2, 3, 4, 5]
    assert_only_tested_trees_landed(sim)
