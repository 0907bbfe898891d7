"""A simulated world for the scheduler: an in-memory code host and CI on virtual time.

Commits are ids with a "tree": the set of changes they contain (a PR's change is its number,
a commit pushed behind the queue's back is a negative number). A run's CI fails when its tree
holds a bad PR (or, by chance, a flaky one). The world carries out the scheduler's effects the
way the real interpreter does and feeds their results back, so tests and benchmarks drive the
very `decide` that production runs.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import assert_never

from keepgreen.core.enums import (
    CommitState,
    Mergeability,
    PrState,
    QueueMode,
    QueueState,
    StateReason,
    TestRunStatus,
)
from keepgreen.core.ids import PullRequestId, QueueId, RepositoryId
from keepgreen.core.model import (
    ChainLink,
    Queue,
    QueueConfig,
    QueueEntry,
    Readiness,
    StateChange,
)
from keepgreen.core.priority import DEFAULT_PRIORITY, Priority
from keepgreen.core.scheduler import (
    BuildTestCommit,
    CancelCi,
    DeleteTestBranch,
    EngineState,
    EntrySubmitted,
    Event,
    ImpactedTargetsSet,
    Land,
    Landed,
    LandRefused,
    Policy,
    StartCi,
    StatusReported,
    TargetBranchMoved,
    TestCommitBuilt,
    TestCommitConflict,
    Tick,
    decide,
)
from keepgreen.core.scheduler.effects import Effect
from keepgreen.core.scheduler.state import TestFailures

CI_CONTEXT = "ci"


@dataclass(frozen=True, slots=True)
class Landing:
    """One move of the target branch: which PR, the tree before and after."""

    number: int
    before: frozenset[int]
    after: frozenset[int]
    tested: frozenset[int] | None  # the tree the run tested for this PR (None: direct merge)


@dataclass
class SimulatedWorld:
    """One queue, its repository and its CI, advanced by hand or by `settle`."""

    config: QueueConfig = field(default_factory=QueueConfig)
    mode: QueueMode = QueueMode.SINGLE
    bad: set[int] = field(default_factory=set)
    conflicts: set[frozenset[int]] = field(default_factory=set)
    flaky: dict[int, float] = field(default_factory=dict)
    # PRs whose first CI answer fails (a deterministic flake): the first test run whose tree
    # holds one of them fails, and the PR is then forgotten here.
    fail_once: set[int] = field(default_factory=set)
    # PRs whose first test run's required check concludes "skipped" (CI ran nothing).
    skip_once: set[int] = field(default_factory=set)
    # The next test commits CI never picks up (a lost webhook, a stuck runner): no status.
    lost_builds: int = 0
    # Whether keepgreen's flaky-test data knows the tests that fail by chance: a spurious
    # failure then comes with JUnit results naming only a known flaky test, and a real one
    # with a failed test that is not flaky.
    knows_flaky: bool = False
    seed: int = 0
    now: datetime = field(default_factory=lambda: datetime(2026, 1, 1, tzinfo=UTC))
    # Every test run fails by chance with this probability (a flaky CI), whatever it holds; a
    # run holding a bad PR fails anyway. Of those chance failures, the share `known_flaky_share`
    # failed only in tests known to be flaky: `flaky_tests_known` is told of them.
    spurious_rate: float = 0.0
    known_flaky_share: float = 0.0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)  # noqa: S311 - simulated flakes, not secrets
        self.trees: dict[str, frozenset[int]] = {"c0": frozenset()}
        # Trees are named by the order they were first seen (t0, t1, ...): short names, the same
        # for the same content, as git's tree ids are.
        self._tree_names: dict[frozenset[int], str] = {}
        self._named_trees: dict[str, frozenset[int]] = {}
        self.tip = "c0"
        self._next_commit = 1
        self.heads: dict[int, str] = {}
        queue = Queue(
            id=QueueId("q"),
            repository_id=RepositoryId("r"),
            branch="main",
            state=QueueState.RUNNING,
            mode=self.mode,
            config=replace(self.config, required_statuses=(CI_CONTEXT,)),
            created_at=self.now,
            updated_at=self.now,
            target_sha="c0",
        )
        self.state = EngineState(queue=queue)
        self.policy = Policy(has_built_in_ci=False)
        self.history: list[StateChange] = []
        self.final: dict[int, QueueEntry] = {}
        self.landings: list[Landing] = []
        self.ci_pending: dict[str, datetime] = {}  # sha -> when CI answers
        self.statuses: dict[str, dict[str, CommitState]] = {}
        self.test_failures: dict[str, TestFailures] = {}
        self.outbox: list[Effect] = []
        self.ci_seconds = 600
        self.on_effect: Callable[[Effect], None] | None = None
        # Test commits whose failure came only from known-flaky tests (see `flaky_tests_known`).
        self.known_flaky_failures: set[str] = set()
        self.spurious_failures = 0  # chance failures drawn (runs whose tree held no bad PR)

    # -- the code host ---------------------------------------------------------------------

    def commit(self, tree: frozenset[int]) -> str:
        sha = f"c{self._next_commit}"
        self._next_commit += 1
        self.trees[sha] = tree
        return sha

    def head_sha(self, number: int) -> str:
        if number not in self.heads:
            self.heads[number] = f"h{number}"
            self.trees[self.heads[number]] = frozenset({number})
        return self.heads[number]

    def clashes(self, number: int, tree: frozenset[int]) -> bool:
        if not self.conflicts:
            return False
        return any(frozenset({number, other}) in self.conflicts for other in tree)

    # -- driving the scheduler -------------------------------------------------------------

    def feed(self, event: Event) -> None:
        self.state = replace(self.state, statuses=self.statuses, test_failures=self.test_failures)
        decision = decide(self.state, event, now=self.now, policy=self.policy)
        self.state = decision.state
        self.history.extend(decision.changes)
        for gone in decision.departed:
            self.final[gone.number] = gone
        self.outbox.extend(decision.effects)

    def submit(
        self,
        number: int,
        *,
        priority: Priority = DEFAULT_PRIORITY,
        no_batch: bool = False,
        targets: tuple[str, ...] | str | None = "unset",
        ready: bool = True,
        up_to_date: bool = False,
    ) -> None:
        """Submit PR `number`. `ready=False`: the code host does not call it mergeable yet (it
        waits in `not_ready` for a `ReadinessChanged`); `up_to_date`: its head contains the tip.
        """
        queue = self.state.queue
        mergeability = Mergeability.MERGEABLE if ready else Mergeability.UNSPECIFIED
        entry = QueueEntry(
            id=PullRequestId(f"pr-{number}"),
            queue_id=queue.id,
            number=number,
            state=PrState.NOT_READY,
            state_changed_at=self.now,
            state_reason=StateReason.SUBMITTED,
            priority=priority,
            no_batch=no_batch,
            head_sha=self.head_sha(number),
            title=f"PR {number}",
            author="sim",
            base_branch="main",
            readiness=Readiness(
                does_base_branch_match=True,
                mergeability=mergeability,
                requires_impacted_targets=False,
                has_impacted_targets=False,
            ),
            is_submitted=True,
            force_enqueued=False,
            position=number,
            submitted_at=self.now,
            is_up_to_date=up_to_date,
        )
        if not isinstance(targets, str):
            self.feed(ImpactedTargetsSet(number, entry.head_sha, targets))
        self.feed(EntrySubmitted(entry))
        if not isinstance(targets, str):
            self.feed(ImpactedTargetsSet(number, entry.head_sha, targets))

    def push_to_target(self, change: int) -> None:
        """Someone commits to the target branch behind the queue's back."""
        self.tip = self.commit(self.trees[self.tip] | {change})
        self.feed(TargetBranchMoved(self.tip))

    def run_effects(self) -> bool:
        """Carry out the outbox, feeding results back; True when anything happened."""
        did = False
        while self.outbox:
            effect = self.outbox.pop(0)
            did = True
            if self.on_effect is not None:
                self.on_effect(effect)
            self.carry_out(effect)
        return did

    def carry_out(self, effect: Effect) -> None:
        match effect:
            case BuildTestCommit():
                self.build(effect)
            case DeleteTestBranch() | CancelCi():
                pass
            case StartCi():
                pass
            case Land():
                self.land(effect)
            case _:
                assert_never(effect)

    def build(self, effect: BuildTestCommit) -> None:
        current = effect.base_sha
        links: list[ChainLink] = []
        for number, head in effect.prs:
            tree = self.trees[current]
            if self.clashes(number, tree):
                self.feed(TestCommitConflict(effect.run_id, number))
                return
            merged = self.commit(tree | self.trees[head])
            links.append(ChainLink(number, head, merged, self.tree_name(tree | {number})))
            current = merged
        if self.lost_builds:
            self.lost_builds -= 1  # CI never hears of this commit
        else:
            self.ci_pending[current] = self.now + timedelta(seconds=self.ci_duration())
            self.statuses[current] = {CI_CONTEXT: CommitState.PENDING}  # CI starts at once
        base_tree = self.tree_name(self.trees[effect.base_sha])
        self.feed(TestCommitBuilt(effect.run_id, base_tree, tuple(links)))

    def ci_duration(self) -> float:
        """Seconds one test run's CI takes (a subclass may draw them from a distribution)."""
        return self.ci_seconds

    def ci_result(self, sha: str) -> CommitState:
        tree = self.trees[sha]
        if tree & self.bad:
            return self.failed(sha, spurious=False)
        if tree & self.skip_once:
            self.skip_once -= tree
            return CommitState.SKIPPED
        if tree & self.fail_once:
            self.fail_once -= tree
            return self.failed(sha, spurious=True)
        if self.flaky:
            for number in sorted(tree):
                if self.rng.random() < self.flaky.get(number, 0.0):
                    return self.failed(sha, spurious=True)
        if self.spurious_rate and self.rng.random() < self.spurious_rate:
            self.spurious_failures += 1
            # Drawn whatever the share, so that with and without flaky-test knowledge the same
            # seed gives the same failures.
            if self.rng.random() < self.known_flaky_share:
                self.known_flaky_failures.add(sha)
                self.flaky_tests_known(sha)
            return CommitState.FAILURE
        return CommitState.SUCCESS

    def failed(self, sha: str, *, spurious: bool) -> CommitState:
        """A failure; with `knows_flaky`, the results uploaded for it name the failed test."""
        if self.knows_flaky:
            if spurious:
                self.flaky_tests_known(sha)
            else:
                self.test_failures[sha] = TestFailures(flaky=(), other=("test_broken_by_pr",))
        return CommitState.FAILURE

    def flaky_tests_known(self, sha: str) -> None:
        """The test run of `sha` failed only in tests keepgreen knows to be flaky: its JUnit
        results, as the worker loads them, name one known flaky test (`test_flaky`).
        """
        self.test_failures[sha] = TestFailures(flaky=("test_flaky",), other=())

    def land(self, effect: Land) -> None:
        if self.tip != effect.expected_tip:
            self.feed(LandRefused(effect.number, "target_moved", self.tip))
            return
        current = self.trees[self.tip]
        if effect.run_id is None:  # direct merge: the head is based on the tip
            if self.clashes(effect.number, current):
                self.feed(LandRefused(effect.number, "conflict"))
                return
            after = current | {effect.number}
            tested = None
        else:
            tested = self.tree_of_name(effect.link.tree)
            parent = (
                self.tree_of_name(effect.parent_tree) if effect.parent_tree is not None else None
            )
            if parent == current:
                after = tested
            elif effect.exact:
                self.feed(LandRefused(effect.number, "tree_mismatch"))
                return
            elif self.clashes(effect.number, current):
                self.feed(LandRefused(effect.number, "conflict"))
                return
            else:
                after = current | {effect.number}
        self.tip = self.commit(after)
        self.landings.append(Landing(effect.number, current, after, tested))
        self.feed(Landed(effect.number, self.tip))

    def step(self, seconds: int = 60) -> None:
        """Let time pass: CI answers that are due are reported, then the scheduler ticks."""
        self.now += timedelta(seconds=seconds)
        for sha, due in sorted(self.ci_pending.items(), key=lambda item: item[1]):
            if due <= self.now:
                del self.ci_pending[sha]
                self.statuses[sha] = {CI_CONTEXT: self.ci_result(sha)}
                self.feed(StatusReported(sha))
                self.run_effects()
        self.feed(Tick())
        self.run_effects()

    def settle(self, *, limit_steps: int = 2000, seconds: int = 60) -> None:
        """Run until no entry is live (or the step limit is hit)."""
        self.run_effects()
        for _ in range(limit_steps):
            if not self.state.entries and not self.outbox:
                return
            self.step(seconds)

    # -- event-driven time -----------------------------------------------------------------

    def next_ci_answer(self) -> datetime | None:
        return min(self.ci_pending.values(), default=None)

    def next_deadline(self) -> datetime | None:
        """The first moment after `now` at which time alone changes what the scheduler does:
        a run's testing timeout, or the end of a forming batch's wait. A new deadline of the
        scheduler's belongs here, or the event-driven simulation does not see it come.
        """
        config = self.state.queue.config
        timeout = timedelta(minutes=config.testing_timeout_minutes)
        found = [
            (run.started_at or run.created_at) + timeout
            for run in self.state.runs
            if run.status is TestRunStatus.IN_PROGRESS
        ]
        if config.batch:
            wait = timedelta(minutes=config.batching_max_wait_time_minutes)
            found.extend(
                entry.state_changed_at + wait
                for entry in self.state.entries
                if entry.state is PrState.PENDING
            )
        return min((moment for moment in found if moment > self.now), default=None)

    def advance(self, until: datetime | None = None) -> bool:
        """Jump to the next moment something happens (a CI answer or a deadline), at most to
        `until`, and let it happen. False when nothing is due up to `until` (then `now` is
        `until`, when given).

        CI answers due at the same moment are reported one by one, in the order their runs
        were built, each decided before the next is known (as webhooks arrive).
        """
        self.run_effects()
        moments = [m for m in (self.next_ci_answer(), self.next_deadline()) if m is not None]
        moment = min(moments, default=None)
        if moment is None or (until is not None and moment > until):
            if until is not None:
                self.now = max(self.now, until)
            return False
        self.now = max(self.now, moment)
        due = sorted(
            (item for item in self.ci_pending.items() if item[1] <= self.now),
            key=lambda item: item[1],
        )
        for sha, _ in due:
            del self.ci_pending[sha]
            self.statuses[sha] = {CI_CONTEXT: self.ci_result(sha)}
            self.feed(StatusReported(sha))
            self.run_effects()
        if not due:
            self.feed(Tick())
            self.run_effects()
        return True

    def tree_name(self, tree: frozenset[int]) -> str:
        name = self._tree_names.get(tree)
        if name is None:
            name = f"t{len(self._tree_names)}"
            self._tree_names[tree] = name
            self._named_trees[name] = tree
        return name

    def tree_of_name(self, name: str) -> frozenset[int]:
        return self._named_trees[name]

    @property
    def main(self) -> frozenset[int]:
        return self.trees[self.tip]

    def states(self) -> dict[int, PrState]:
        found = {e.number: e.state for e in self.state.entries}
        found.update({n: e.state for n, e in self.final.items() if n not in found})
        return found

    def reasons(self) -> dict[int, StateReason]:
        found = {e.number: e.state_reason for e in self.state.entries}
        found.update({n: e.state_reason for n, e in self.final.items() if n not in found})
        return found


__all__ = ["CI_CONTEXT", "Landing", "SimulatedWorld"]
