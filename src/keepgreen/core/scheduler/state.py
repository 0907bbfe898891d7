"""The scheduler's input and output: the durable state of one queue and its policy."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from keepgreen.core.enums import CommitState
from keepgreen.core.ids import PullRequestId
from keepgreen.core.model import (
    DEFAULT_TEST_BRANCH_PREFIX,
    Queue,
    QueueEntry,
    StateChange,
    TestRun,
)
from keepgreen.core.scheduler.effects import Effect

BUILT_IN_CI_CONTEXT = "keepgreen/ci"


@dataclass(frozen=True, slots=True)
class Policy:
    """Facts about the queue's repository that are not queue state."""

    has_built_in_ci: bool = False
    # Test branches are `<prefix>/pr-<N>/<testRunId>`; a run keeps the name it was given, so a
    # prefix changed while runs are open names only the runs made after the change.
    test_branch_prefix: str = DEFAULT_TEST_BRANCH_PREFIX
    # The repository uploads JUnit results (it did lately): a failed run waits a little for
    # them before it counts, so that failures of known flaky tests can be told apart.
    uploads_test_results: bool = False

    def required_statuses(self, queue: Queue) -> tuple[str, ...]:
        """The queue's override; else what the code host's branch protection requires (on
        GitHub); else the built-in runner's status; else none at all.
        """
        if queue.config.required_statuses is not None:
            return queue.config.required_statuses
        if queue.host_required_statuses:
            return queue.host_required_statuses
        return (BUILT_IN_CI_CONTEXT,) if self.has_built_in_ci else ()


@dataclass(frozen=True, slots=True)
class TestFailures:
    """What the JUnit results uploaded for one test commit say about its failed tests: those
    known flaky or quarantined in keepgreen's flaky-test data, and the others.
    """

    __test__ = False

    flaky: tuple[str, ...]
    other: tuple[str, ...]

    @property
    def only_flaky(self) -> bool:
        return bool(self.flaky) and not self.other


@dataclass(frozen=True, slots=True)
class EngineState:
    """One queue as the scheduler sees it.

    `entries` are the live (non-terminal) entries, `runs` the open test runs, `failed_runs` the
    closed failed runs of bisections still going (the redundant-test cache). `targets` maps an
    entry to the impacted targets uploaded for its current head (None: ALL; absent: none).
    `statuses` holds the commit statuses of run heads and entry heads, by sha then context.
    `test_failures` holds, by sha, what uploaded test results say about failed runs' heads.
    `in_flight` are effects decided but not yet carried out (the outbox).
    """

    queue: Queue
    entries: tuple[QueueEntry, ...] = ()
    runs: tuple[TestRun, ...] = ()
    failed_runs: tuple[TestRun, ...] = ()
    targets: Mapping[PullRequestId, tuple[str, ...] | None] = field(default_factory=dict)
    statuses: Mapping[str, Mapping[str, CommitState]] = field(default_factory=dict)
    test_failures: Mapping[str, TestFailures] = field(default_factory=dict)
    in_flight: tuple[Effect, ...] = ()


@dataclass(frozen=True, slots=True)
class Decision:
    """The new state, the effects to carry out, and the history lines to record.

    `departed` are entries that reached a terminal state in this decision (they are no longer
    in `state.entries`); `closed_runs` the runs closed by it (no longer in `state.runs`).
    """

    state: EngineState
    effects: tuple[Effect, ...]
    changes: tuple[StateChange, ...]
    departed: tuple[QueueEntry, ...]
    closed_runs: tuple[TestRun, ...]
