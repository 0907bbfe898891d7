"""Never a silent stall, no vacuous green, and a failure is not a verdict until it is believed:
the check start timeout, the adaptive testing timeout, skipped checks, retries and what the
flaky-test data knows, on the simulated world (the real `decide`, virtual time).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from keepgreen.core.enums import FlakyFailures, PrState, StateReason
from keepgreen.core.ids import PullRequestId
from keepgreen.core.model import QueueConfig, StateChange
from keepgreen.core.scheduler import BuildTestCommit, Policy
from keepgreen.core.scheduler.effects import Effect
from keepgreen.simulation.world import SimulatedWorld

MERGED, FAILED = PrState.MERGED, PrState.FAILED


def world(**config: Any) -> tuple[SimulatedWorld, list[tuple[int, ...]]]:
    """A world with this configuration and the list of test commits it built (PR numbers)."""
    sim = SimulatedWorld(config=QueueConfig(**config))
    built: list[tuple[int, ...]] = []

    def watch(effect: Effect) -> None:
        if isinstance(effect, BuildTestCommit):
            built.append(tuple(number for number, _ in effect.prs))

    sim.on_effect = watch
    return sim, built


def history(sim: SimulatedWorld, number: int) -> list[StateChange]:
    pr = PullRequestId(f"pr-{number}")
    return [change for change in sim.history if change.pull_request_id == pr]


def last(sim: SimulatedWorld, number: int) -> StateChange:
    return history(sim, number)[-1]


def minutes_after_start(sim: SimulatedWorld, change: StateChange) -> float:
    return (change.at - sim.state.queue.created_at).total_seconds() / 60


# -- a check that never starts -------------------------------------------------------------------


def test_a_check_that_never_starts_fails_the_run_after_the_start_timeout_not_the_testing_one() -> (
    None
):
    """CI never hears of PR 1's test commit (a lost webhook). With a 30-minute check start
    timeout the run fails after 30 minutes as "check ci never started", not after the 5-hour
    testing timeout, and PR 2 behind it is tested and merges.
    """
    sim, _ = world(check_start_timeout_minutes=30, testing_timeout_minutes=300)
    sim.lost_builds = 1
    sim.submit(1)
    sim.submit(2)
    sim.settle()

    assert sim.states() == {1: FAILED, 2: MERGED}
    failed = last(sim, 1)
    assert failed.reason is StateReason.CHECK_NEVER_STARTED
    assert failed.detail == "ci"
    assert 30 <= minutes_after_start(sim, failed) <= 32


def test_without_the_start_timeout_a_check_that_never_starts_waits_for_the_testing_timeout() -> (
    None
):
    sim, _ = world(check_start_timeout_minutes=0, testing_timeout_minutes=120)
    sim.lost_builds = 1
    sim.submit(1)
    sim.settle()

    failed = last(sim, 1)
    assert failed.reason is StateReason.TEST_RUN_TIMEOUT
    assert minutes_after_start(sim, failed) >= 120


def test_a_check_that_never_started_is_retried_while_retries_remain() -> None:
    sim, built = world(check_start_timeout_minutes=30, max_retries=1)
    sim.lost_builds = 1
    sim.submit(1)
    sim.settle()

    assert sim.states() == {1: MERGED}
    assert built == [(1,), (1,)]
    retried = next(c for c in history(sim, 1) if c.reason is StateReason.RETRYING)
    assert retried.detail == "attempt 2 of 2, beside the queue: check never started (ci)"


# -- no vacuous green ----------------------------------------------------------------------------


def test_a_required_check_that_was_skipped_does_not_pass_the_run() -> None:
    """CI ran nothing for PR 1 (its required check concluded "skipped"): that is no pass. PR 1
    fails as `check_skipped`, naming the check, and nothing of it reaches the branch.
    """
    sim, _ = world()
    sim.skip_once = {1}
    sim.submit(1)
    sim.settle()

    assert sim.states() == {1: FAILED}
    assert (last(sim, 1).reason, last(sim, 1).detail) == (StateReason.CHECK_SKIPPED, "ci")
    assert sim.main == frozenset()


def test_a_queue_may_accept_skipped_checks() -> None:
    sim, _ = world(accept_skipped_checks=True)
    sim.skip_once = {1}
    sim.submit(1)
    sim.settle()

    assert sim.states() == {1: MERGED}


def test_a_queue_without_required_checks_passes_nothing() -> None:
    """An empty required set is refused, not green."""
    sim, _ = world()
    sim.state = replace(
        sim.state, queue=replace(sim.state.queue, config=QueueConfig(required_statuses=()))
    )
    sim.submit(1)
    sim.settle()

    assert sim.states() == {1: FAILED}
    assert last(sim, 1).reason is StateReason.NO_REQUIRED_STATUSES


# -- retries -------------------------------------------------------------------------------------


def test_a_spurious_failure_is_retried_beside_the_queue_and_the_pr_merges() -> None:
    """maxRetries 1: PR 1's run fails by chance. It is set aside and tested again alone beside
    the queue; that run passes on the current tip with nothing ahead, so it lands as tested.
    """
    sim, built = world(max_retries=1)
    sim.fail_once = {1}
    sim.submit(1)
    sim.settle()

    assert sim.states() == {1: MERGED}
    assert built == [(1,), (1,)]
    retried = next(c for c in history(sim, 1) if c.reason is StateReason.RETRYING)
    assert retried.detail == "attempt 2 of 2, beside the queue: tests failed"
    assert sim.state.queue.stats.refuted == 1  # the retry showed the failure was spurious


def test_a_spurious_failure_is_retried_in_line_when_bisecting_in_line() -> None:
    sim, built = world(max_retries=1, bisect_beside_queue=False)
    sim.fail_once = {1}
    sim.submit(1)
    sim.settle()

    assert sim.states() == {1: MERGED}
    assert built == [(1,), (1,)]
    reasons = [(c.to_state, c.reason, c.detail) for c in history(sim, 1)]
    assert (PrState.TESTING, StateReason.RETRYING, "attempt 2 of 2: tests failed") in reasons


def test_without_retries_the_same_failure_fails_the_pr() -> None:
    sim, built = world(max_retries=0)
    sim.fail_once = {1}
    sim.submit(1)
    sim.settle()

    assert sim.states() == {1: FAILED}
    assert built == [(1,)]


def test_a_bad_pr_fails_after_its_retries_and_the_pr_behind_it_merges() -> None:
    sim, built = world(max_retries=2)
    sim.bad = {1}
    sim.submit(1)
    sim.submit(2)
    sim.settle()

    assert sim.states() == {1: FAILED, 2: MERGED}
    assert built.count((1,)) == 3  # the run and two retries
    assert sim.main == {2}
    # Both retries failed: one judgment that the failure was real.
    assert sim.state.queue.stats.confirmed == 1


def test_retries_stop_when_the_queues_failures_are_real_and_come_back_in_time() -> None:
    """Every failure in this queue is real: once enough retries failed again, the queue's
    estimate of spurious failures falls and failed runs are no longer retried; each failure
    not retried ages that record, so retries come back now and then instead of never.
    """
    sim, built = world(max_retries=1)
    numbers = range(1, 41)
    sim.bad = set(numbers)
    for number in numbers:
        sim.submit(number)
    sim.settle()

    assert set(sim.states().values()) == {FAILED}
    runs_per_pr = [built.count((n,)) for n in numbers]
    assert runs_per_pr[0] == 2  # no record yet: a retry pays
    first_unretried = runs_per_pr.index(1)  # the record says failures here are real
    assert 2 in runs_per_pr[first_unretried:]  # and later it tries again


# -- the testing timeout follows the queue's history ---------------------------------------------


def test_the_adaptive_testing_timeout_follows_the_queues_p95() -> None:
    """Twenty PRs pass in 10 minutes each; then CI loses a run (no status at all, and no check
    start timeout). The adaptive timeout (p95 x 1.25 + 10 min = 22.5 min) fails it long before
    the fixed 300 minutes.
    """
    sim, _ = world(
        adaptive_testing_timeout=True, testing_timeout_minutes=300, check_start_timeout_minutes=0
    )
    for number in range(1, 21):
        sim.submit(number)
    sim.settle()
    assert len(sim.state.queue.stats.ci_seconds) == 20
    sim.lost_builds = 1
    started = sim.now
    sim.submit(21)
    sim.settle()

    failed = last(sim, 21)
    assert failed.reason is StateReason.TEST_RUN_TIMEOUT
    assert timedelta(minutes=22) <= failed.at - started <= timedelta(minutes=25)


def test_the_adaptive_timeout_waits_for_enough_history() -> None:
    sim, _ = world(
        adaptive_testing_timeout=True, testing_timeout_minutes=60, check_start_timeout_minutes=0
    )
    sim.lost_builds = 1
    sim.submit(1)
    sim.settle()

    failed = last(sim, 1)
    assert failed.reason is StateReason.TEST_RUN_TIMEOUT
    assert minutes_after_start(sim, failed) >= 60


# -- what the flaky-test data knows --------------------------------------------------------------


def test_a_failure_of_known_flaky_tests_only_passes_with_the_tests_named() -> None:
    sim, built = world(flaky_failures=FlakyFailures.PASS)
    sim.knows_flaky = True
    sim.fail_once = {1}
    sim.submit(1)
    sim.settle()

    assert sim.states() == {1: MERGED}
    assert built == [(1,)]  # no second run
    forgiven = next(c for c in history(sim, 1) if c.reason is StateReason.FLAKY_FAILURES_FORGIVEN)
    assert forgiven.to_state is PrState.TESTS_PASSED
    assert forgiven.detail == "only known flaky tests failed: test_flaky"


def test_a_failure_of_known_flaky_tests_only_is_retried_even_without_max_retries() -> None:
    sim, built = world(flaky_failures=FlakyFailures.RETRY, max_retries=0)
    sim.knows_flaky = True
    sim.fail_once = {1}
    sim.submit(1)
    sim.settle()

    assert sim.states() == {1: MERGED}
    assert built == [(1,), (1,)]
    retried = next(c for c in history(sim, 1) if c.reason is StateReason.RETRYING)
    assert retried.detail == "attempt 2 of 2: only known flaky tests failed: test_flaky"


def test_a_real_failure_is_not_forgiven() -> None:
    sim, _ = world(flaky_failures=FlakyFailures.PASS)
    sim.knows_flaky = True
    sim.bad = {1}
    sim.submit(1)
    sim.submit(2)
    sim.settle()

    assert sim.states() == {1: FAILED, 2: MERGED}
    assert sim.main == {2}


def test_with_flaky_failures_off_the_data_is_not_used() -> None:
    sim, _ = world(flaky_failures=FlakyFailures.OFF)
    sim.knows_flaky = True
    sim.fail_once = {1}
    sim.submit(1)
    sim.settle()

    assert sim.states() == {1: FAILED}


def test_a_failed_run_waits_a_little_for_uploaded_results() -> None:
    """The repository uploads JUnit results, but none came for this run: the failure counts
    five minutes after it was reported, not at once.
    """
    sim, _ = world()
    sim.policy = Policy(uploads_test_results=True)
    sim.fail_once = {1}
    sim.submit(1)
    sim.settle()

    reported, failed = history(sim, 1)[-2:]
    assert reported.to_state is PrState.PENDING_FAILURE
    assert failed.to_state is FAILED
    assert failed.at - reported.at >= timedelta(minutes=5)
