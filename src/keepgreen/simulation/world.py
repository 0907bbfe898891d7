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

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)  # noqa: S311 - simulated flakes, not secrets
        self.trees: dict[str, frozenset[int]] = {"c0": frozenset()}
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
            links.append(ChainLink(number, head, merged, _tree_name(tree | {number})))
            current = merged
        if self.lost_builds:
            self.lost_builds -= 1  # CI never hears of this commit
        else:
            self.ci_pending[current] = self.now + timedelta(seconds=self.ci_seconds)
            self.statuses[current] = {CI_CONTEXT: CommitState.PENDING}  # CI starts at once
        base_tree = _tree_name(self.trees[effect.base_sha])
        self.feed(TestCommitBuilt(effect.run_id, base_tree, tuple(links)))

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
        for number in sorted(tree):
            if self.rng.random() < self.flaky.get(number, 0.0):
                return self.failed(sha, spurious=True)
        return CommitState.SUCCESS

    def failed(self, sha: str, *, spurious: bool) -> CommitState:
        """A failure; with `knows_flaky`, the results uploaded for it name the failed test."""
        if self.knows_flaky:
            if spurious:
                self.test_failures[sha] = TestFailures(flaky=("test_flaky",), other=())
            else:
                self.test_failures[sha] = TestFailures(flaky=(), other=("test_broken_by_pr",))
        return CommitState.FAILURE

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
            tested = _tree_from_name(effect.link.tree)
            parent = _tree_from_name(effect.parent_tree) if effect.parent_tree is not None else None
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


def _tree_name(tree: frozenset[int]) -> str:
    return ",".join(map(str, sorted(tree)))


def _tree_from_name(name: str) -> frozenset[int]:
    return frozenset(int(part) for part in name.split(",") if part)


__all__ = ["CI_CONTEXT", "Landing", "SimulatedWorld"]
