"""The scheduler's safety and liveness under random traffic, on a simulated code host and CI.

A Hypothesis state machine drives a `SimulatedWorld` with a random queue configuration through
random submissions (bad, flaky, conflicting, prioritised, unbatched PRs with random targets),
cancellations, restarts, pushes to PRs and to the target branch (also racing a landing that is
under way), pauses, drains, mode switches and the passing of time. After every step it checks
what a merge queue promises:

* only tested trees land: a landing adds exactly its PR; in single mode the branch becomes the
  very tree the PR was tested in, and in parallel mode every PR of its lane that it was tested
  on top of has landed before it;
* a PR lands at most once, only while it is in the queue, and a bad PR never lands;
* order within a lane: of two PRs in the same lane with the same (non-urgent) priority, the one
  submitted first lands first (priorities, urgent PRs and PRs cleared beside the queue, which
  rejoin the line behind the PRs in flight, are the only reorderings);
* at most `concurrency` main runs and `bisectionConcurrency` bisection runs are in progress, and
  at most one open run tests any entry;

and at the end, once the queue runs and CI answers, every PR reaches a terminal state: bad PRs
fail, PRs nobody cancelled are never cancelled, and without flaky PRs, lost CI runs or refused
skipped checks every good PR that conflicts with no other merges.

The queue's own settings are drawn too: retries, the check start timeout (CI may lose a test
commit and never start its check), skipped checks accepted or refused (a PR's first run may be
skipped), the adaptive testing timeout, and what the flaky-test data knows (off, retry, pass).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from keepgreen.core.enums import (
    CommitState,
    DirectMergeMode,
    FlakyFailures,
    OptimizationMode,
    PrState,
    QueueMode,
    QueueState,
    StateReason,
    TestRunKind,
    TestRunStatus,
)
from keepgreen.core.model import QueueConfig
from keepgreen.core.priority import Priority, priority_from_name
from keepgreen.core.scheduler import (
    Event,
    Land,
    Policy,
    PrHeadMoved,
    QueueConfigChanged,
    RestartRequested,
    UserCancelled,
)
from keepgreen.core.scheduler.effects import Effect
from keepgreen.simulation.world import CI_CONTEXT, SimulatedWorld

Targets = tuple[str, ...] | None
TARGETS: list[Targets] = [None, (), ("a",), ("b",), ("a", "b"), ("c",)]
PRIORITIES = [priority_from_name(name) for name in ("medium", "medium", "high", "low", "urgent")]


def overlap(first: Targets, second: Targets) -> bool:
    """Parallel lanes: ALL (None) overlaps every non-empty list; an empty list overlaps nothing."""
    if first == () or second == ():
        return False
    if first is None or second is None:
        return True
    return not set(first).isdisjoint(second)


@dataclass
class Submitted:
    """What the test knows about one PR it submitted."""

    number: int
    targets: Targets
    priority: Priority
    bad: bool
    flaky: bool
    skipped: bool = False


@dataclass
class RecordingWorld(SimulatedWorld):
    """A world that notes the queue mode each PR was admitted in."""

    admitted: dict[int, QueueMode] = field(default_factory=dict)

    def feed(self, event: Event) -> None:
        seen = len(self.history)
        SimulatedWorld.feed(self, event)
        for change in self.history[seen:]:
            if change.to_state is PrState.PENDING and change.reason is StateReason.READY:
                number = int(change.pull_request_id.removeprefix("pr-"))
                self.admitted[number] = self.state.queue.mode


@dataclass(frozen=True)
class PrSpec:
    """A PR to submit: bad (fails every run holding it), flaky (fails 30% of runs holding it),
    conflicting with the PR `clash_back` numbers before it (0: none), and its options.
    """

    bad: bool
    flaky: bool
    clash_back: int
    priority: Priority
    no_batch: bool
    targets: Targets
    up_to_date: bool
    skipped: bool = False


pr_specs = st.builds(
    PrSpec,
    bad=st.integers(0, 2).map(lambda n: n == 0),
    flaky=st.integers(0, 9).map(lambda n: n == 0),
    clash_back=st.integers(-10, 3).map(lambda n: max(n, 0)),
    priority=st.sampled_from(PRIORITIES),
    no_batch=st.integers(0, 4).map(lambda n: n == 0),
    targets=st.sampled_from(TARGETS),
    up_to_date=st.booleans(),
    skipped=st.integers(0, 7).map(lambda n: n == 0),
)

configs = st.builds(
    QueueConfig,
    concurrency=st.integers(1, 4),
    bisection_concurrency=st.integers(1, 2),
    testing_timeout_minutes=st.sampled_from([30, 300]),
    pending_failure_depth=st.integers(0, 2),
    can_optimistically_merge=st.booleans(),
    batch=st.booleans(),
    batching_min_size=st.integers(2, 4),
    batching_max_wait_time_minutes=st.integers(1, 5),
    direct_merge_mode=st.sampled_from([DirectMergeMode.OFF, DirectMergeMode.ALWAYS]),
    optimization_mode=st.sampled_from(
        [OptimizationMode.OFF, OptimizationMode.BISECTION_SKIP_REDUNDANT_TESTS]
    ),
    check_start_timeout_minutes=st.sampled_from([0, 20]),
    adaptive_testing_timeout=st.booleans(),
    accept_skipped_checks=st.booleans(),
    max_retries=st.integers(0, 2),
    flaky_failures=st.sampled_from(list(FlakyFailures)),
    bisect_beside_queue=st.booleans(),
)


class MergeQueueMachine(RuleBasedStateMachine):
    """One queue, random traffic, the queue's promises checked after every step."""

    def __init__(self) -> None:
        super().__init__()
        self.world = RecordingWorld()
        self.prs: dict[int, Submitted] = {}
        self.cancelled: set[int] = set()
        self.conflicted: set[int] = set()
        self.foreign = 0
        self.exact: dict[int, bool] = {}
        self.violations: list[str] = []
        self.race: str | None = None
        self.lost = False  # CI lost a test commit: a good PR may fail as never started
        self.losses = 0  # test commits CI lost: each run waits out its testing timeout

    # -- setup --------------------------------------------------------------------------------

    @initialize(
        config=configs,
        mode=st.sampled_from([QueueMode.SINGLE, QueueMode.PARALLEL]),
        specs=st.lists(pr_specs, max_size=6),
        knows_flaky=st.booleans(),
        uploads=st.booleans(),
    )
    def start(
        self,
        config: QueueConfig,
        mode: QueueMode,
        specs: list[PrSpec],
        knows_flaky: bool,
        uploads: bool,
    ) -> None:
        self.world = RecordingWorld(config=config, mode=mode, knows_flaky=knows_flaky)
        self.world.policy = Policy(uploads_test_results=uploads)
        self.world.on_effect = self.watch_effect
        for spec in specs:
            self.submit_one(spec)
        self.world.run_effects()

    def watch_effect(self, effect: Effect) -> None:
        """Called just before the world carries out an effect: check each landing as it starts."""
        if not isinstance(effect, Land):
            return
        live = {e.number for e in self.world.state.entries if e.state.is_admitted}
        if effect.number not in live:
            self.violations.append(f"PR {effect.number} lands while not in the queue")
        self.exact[effect.number] = effect.exact
        race, self.race = self.race, None
        if race == "push_to_target":  # the branch moves under the landing: it is refused
            self.foreign -= 1
            self.world.push_to_target(self.foreign)
        elif race == "cancel":  # too late: the landing decides
            self.cancelled.add(effect.number)
            self.world.feed(UserCancelled(effect.number))
        elif race == "push_to_pr":
            self.cancelled.add(effect.number)
            self.world.feed(PrHeadMoved(effect.number, f"h{effect.number}-amended"))

    # -- helpers ------------------------------------------------------------------------------

    def live(self) -> list[int]:
        return sorted(e.number for e in self.world.state.entries)

    def feed(self, event: Event) -> None:
        self.world.feed(event)
        self.world.run_effects()

    def set_state(self, state: QueueState) -> None:
        self.feed(QueueConfigChanged(replace(self.world.state.queue, state=state)))

    # -- rules --------------------------------------------------------------------------------

    @rule(specs=st.lists(pr_specs, min_size=1, max_size=3))
    def submit(self, specs: list[PrSpec]) -> None:
        for spec in specs:
            self.submit_one(spec)
        self.world.run_effects()

    def submit_one(self, spec: PrSpec) -> None:
        number = len(self.prs) + 1
        if spec.clash_back and number > spec.clash_back:
            other = number - spec.clash_back
            self.world.conflicts.add(frozenset({number, other}))
            self.conflicted |= {number, other}
        self.prs[number] = Submitted(
            number, spec.targets, spec.priority, spec.bad, spec.flaky, spec.skipped
        )
        if spec.skipped:
            self.world.skip_once.add(number)
        if spec.bad:
            self.world.bad.add(number)
        if spec.flaky:
            self.world.flaky[number] = 0.3
        own = CommitState.FAILURE if spec.bad else CommitState.SUCCESS
        self.world.statuses[self.world.head_sha(number)] = {CI_CONTEXT: own}
        self.world.submit(
            number,
            priority=spec.priority,
            no_batch=spec.no_batch,
            targets=spec.targets,
            up_to_date=spec.up_to_date,
        )

    @precondition(lambda self: bool(self.live()))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        number = data.draw(st.sampled_from(self.live()))
        self.cancelled.add(number)
        self.feed(UserCancelled(number))

    @precondition(lambda self: bool(self.live()))
    @rule(data=st.data())
    def restart(self, data: st.DataObject) -> None:
        self.feed(RestartRequested(data.draw(st.sampled_from(self.live()))))

    @precondition(lambda self: bool(self.live()))
    @rule(data=st.data())
    def push_to_pr(self, data: st.DataObject) -> None:
        number = data.draw(st.sampled_from(self.live()))
        self.cancelled.add(number)
        self.feed(PrHeadMoved(number, f"h{number}-amended"))

    @rule(race=st.sampled_from(["push_to_target", "cancel", "push_to_pr"]))
    def race_the_next_landing(self, race: str) -> None:
        """Arm an event to arrive while the next landing is under way (decided, not yet done)."""
        self.race = race

    @rule()
    def lose_the_next_test_commit(self) -> None:
        """CI never hears of the next test commit built (a lost webhook)."""
        self.world.lost_builds += 1
        self.lost = True
        self.losses += 1

    @rule()
    def push_to_target(self) -> None:
        self.foreign -= 1
        self.world.push_to_target(self.foreign)
        self.world.run_effects()

    @precondition(lambda self: self.world.state.queue.state is not QueueState.SWITCHING_MODES)
    @rule(state=st.sampled_from([QueueState.RUNNING, QueueState.PAUSED, QueueState.DRAINING]))
    def update_queue_state(self, state: QueueState) -> None:
        self.set_state(state)

    @precondition(lambda self: self.world.state.queue.state is QueueState.RUNNING)
    @rule()
    def switch_mode(self) -> None:
        """`updateQueue` with the other mode: at once on an empty queue, else `switching_modes`."""
        queue = self.world.state.queue
        other = QueueMode.PARALLEL if queue.mode is QueueMode.SINGLE else QueueMode.SINGLE
        busy = any(e.state.is_admitted for e in self.world.state.entries) or self.world.state.runs
        if busy:
            queue = replace(queue, state=QueueState.SWITCHING_MODES, pending_mode=other)
        else:
            queue = replace(queue, mode=other)
        self.feed(QueueConfigChanged(queue))

    @rule(seconds=st.sampled_from([30, 60, 300, 600]))
    def let_time_pass(self, seconds: int) -> None:
        self.world.step(seconds)

    @rule()
    def settle(self) -> None:
        self.world.settle(limit_steps=30)

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def nothing_went_wrong_while_landing(self) -> None:
        assert self.violations == []

    @invariant()
    def only_tested_trees_land(self) -> None:
        for landing in self.world.landings:
            assert landing.after == landing.before | {landing.number}
            if landing.tested is None:
                continue  # a direct merge: the PR's own checks, on the tip it is based on
            assert landing.number in landing.tested
            if self.exact[landing.number]:
                assert landing.after == landing.tested
                continue
            # Parallel lanes: the tested change lands on the current tip. Everything in its
            # lane that it was tested on top of has landed (PRs of other lanes need not have:
            # a batch behind an ALL PR spans lanes).
            mine = self.prs[landing.number].targets
            ahead = {
                n
                for n in landing.tested - {landing.number}
                if n < 0 or overlap(self.prs[n].targets, mine)
            }
            assert ahead <= landing.before, (
                f"PR {landing.number} landed before a PR ahead of it in its lane"
            )

    @invariant()
    def prs_land_once_and_only_from_the_queue(self) -> None:
        numbers = [landing.number for landing in self.world.landings]
        assert len(numbers) == len(set(numbers))
        for number in numbers:
            assert self.world.final[number].state is PrState.MERGED
        merged = {n for n, e in self.world.final.items() if e.state is PrState.MERGED}
        assert merged == set(numbers)

    @invariant()
    def bad_prs_never_land(self) -> None:
        assert not self.world.main & self.world.bad
        for landing in self.world.landings:
            assert not landing.after & self.world.bad

    @invariant()
    def prs_land_in_queue_order_within_a_lane(self) -> None:
        landed = [landing.number for landing in self.world.landings]
        for index, later in enumerate(landed):
            for earlier in landed[:index]:
                # `earlier` landed first: it must not be behind `later` in their lane.
                if later < earlier and self.same_lane_same_rank(later, earlier):
                    msg = f"PR {earlier} landed before PR {later}, ahead of it in its lane"
                    raise AssertionError(msg)

    def same_lane_same_rank(self, first: int, second: int) -> bool:
        """Both non-urgent with one priority, admitted in one mode, in one lane there."""
        a, b = self.prs[first], self.prs[second]
        if a.priority.skips_the_line or a.priority.value != b.priority.value:
            return False
        if b.priority.skips_the_line:
            return False
        if self.rejoined(first) or self.rejoined(second):
            return False
        mode = self.world.admitted.get(second)
        if mode is None or self.world.admitted.get(first) is not mode:
            return False
        return mode is QueueMode.SINGLE or overlap(a.targets, b.targets)

    @invariant()
    def capacity_is_respected(self) -> None:
        config = self.world.state.queue.config
        running = [r for r in self.world.state.runs if r.status is TestRunStatus.IN_PROGRESS]
        main = [r for r in running if r.kind is TestRunKind.MAIN]
        bisection = [r for r in running if r.kind is TestRunKind.BISECTION]
        assert len(main) <= config.concurrency
        assert len(bisection) <= config.bisection_concurrency

    @invariant()
    def one_open_run_per_entry(self) -> None:
        tested = [t for run in self.world.state.runs for t in run.tested_prs]
        assert len(tested) == len(set(tested))

    # -- the end ------------------------------------------------------------------------------

    def teardown(self) -> None:
        """Resume the queue and let CI answer: every PR ends merged, failed or cancelled."""
        if self.world.state.queue.state in (QueueState.PAUSED, QueueState.DRAINING):
            self.set_state(QueueState.RUNNING)
        # Steps of a minute: time besides for each lost test commit's run to time out (ten
        # of them at a 300-minute timeout are 50 hours, all of 3,000 steps).
        timeout = self.world.state.queue.config.testing_timeout_minutes
        self.world.settle(limit_steps=3000 + self.losses * (timeout + 1))
        self.nothing_went_wrong_while_landing()
        self.only_tested_trees_land()
        self.prs_land_once_and_only_from_the_queue()
        self.bad_prs_never_land()
        self.prs_land_in_queue_order_within_a_lane()

        states = self.world.states()
        assert set(states) == set(self.prs)
        assert all(state.is_terminal for state in states.values()), states
        assert self.world.state.runs == ()
        for number, pr in self.prs.items():
            state = states[number]
            if state is PrState.CANCELLED:
                assert number in self.cancelled, f"PR {number} cancelled by nobody"
            if number in self.cancelled:
                continue
            if pr.bad:
                assert state is PrState.FAILED, f"bad PR {number} ended {state}"
            elif not self.disturbed(number):
                assert state is PrState.MERGED, (
                    f"good PR {number} ended {state}: {self.story(number)}"
                )

    def rejoined(self, number: int) -> bool:
        """Set aside beside the queue at some point (its failed batch isolated, or its failure
        retried there): the line went on without it, and it rejoined behind.
        """
        if not self.world.state.queue.config.bisect_beside_queue:
            return False
        aside = {StateReason.BISECTING, StateReason.RETRYING, StateReason.CLEARED_BY_ISOLATION}
        return any(
            c.pull_request_id == f"pr-{number}" and c.reason in aside for c in self.world.history
        )

    def disturbed(self, number: int) -> bool:
        """Whether a good PR may have failed without a fault of the queue: flaky PRs, a
        conflict, a lost test commit, or a skipped check the queue refuses (its own or, in a
        batch or behind it, another PR's).
        """
        refused_skips = not self.world.state.queue.config.accept_skipped_checks and any(
            pr.skipped for pr in self.prs.values()
        )
        return bool(self.world.flaky) or number in self.conflicted or self.lost or refused_skips

    def story(self, number: int) -> str:
        """PR `number`'s history, for failure messages."""
        changes = [c for c in self.world.history if c.pull_request_id == f"pr-{number}"]
        return ", ".join(f"{c.to_state}({c.reason})" for c in changes)


MergeQueueMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestMergeQueue = MergeQueueMachine.TestCase
