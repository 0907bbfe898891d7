"""The queue engine: load a queue's state, `decide`, persist the decision with its effects.

Every change to a queue's entries and runs goes through `QueueEngine.advance`, inside the
caller's transaction and under the queue's row lock, so API requests and the worker are
serialised per queue. The effects are written to the outbox in the same transaction; only the
worker holding the queue's lease carries them out (see `worker.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from keepgreen.app.flaky.failed_runs import failed_run_tests, uploads_test_results
from keepgreen.app.ports import Clock, UnitOfWork
from keepgreen.app.queue_log import log_decision, log_entered
from keepgreen.app.telemetry import RunTransition, Telemetry
from keepgreen.core.enums import FlakyFailures, PrState
from keepgreen.core.ids import PullRequestId, QueueId
from keepgreen.core.model import (
    UNREAD_HEAD,
    PullRequestInfo,
    Queue,
    QueueEntry,
    RepoRef,
    Repository,
    StateChange,
    TestRun,
)
from keepgreen.core.scheduler import (
    Decision,
    EngineState,
    Event,
    Policy,
    PrsRead,
    decide,
    entering,
)

_LIVE_STATES = frozenset(state for state in PrState if not state.is_terminal)


@dataclass(frozen=True, slots=True)
class Loaded:
    """A queue's scheduler state with the repository it belongs to."""

    repository: Repository
    state: EngineState
    policy: Policy


@dataclass(frozen=True, slots=True)
class Planned:
    """A decision made, not yet written (`QueueEngine.plan`, `QueueEngine.write`)."""

    loaded: Loaded
    event: Event
    decision: Decision


class QueueEngine:
    """Runs `decide` against the database for one queue at a time."""

    def __init__(self, *, clock: Clock, telemetry: Telemetry | None = None) -> None:
        self._clock = clock
        # None: metrics go to a registry of its own that nobody reads (parts built alone).
        self._telemetry = telemetry or Telemetry()

    def load(
        self,
        uow: UnitOfWork,
        queue: Queue,
        *,
        now: datetime,
        read: Sequence[PullRequestInfo] = (),
    ) -> Loaded:
        """The queue's state as the scheduler needs it (the caller holds the queue row lock).
        `read`: PRs read for `PrsRead`, whose uploads and statuses are loaded for their heads.
        """
        repository = uow.repositories.get(queue.repository_id)
        entries = live_entries(uow, queue.id)
        runs = tuple(uow.test_runs.list_open(queue.id))
        roots = {run.bisection_root for run in runs if run.bisection_root is not None}
        failed = tuple(uow.test_runs.list_failed_in_bisections(queue.id, roots))
        read_heads = {info.number: info.head_sha for info in read}
        heads = {
            entry.id: entry.head_sha if entry.is_read else read_heads.get(entry.number, UNREAD_HEAD)
            for entry in entries
        }
        # An unread head has no uploads (no upload names the empty sha): not asked, which
        # under a flood of first submits is most of the queue.
        uploads = uow.impacted_targets.find_for_heads(
            queue.id,
            [
                (entry.number, heads[entry.id])
                for entry in entries
                if heads[entry.id] != UNREAD_HEAD
            ],
        )
        targets: dict[PullRequestId, tuple[str, ...] | None] = {
            entry.id: uploads[(entry.number, heads[entry.id])].targets
            for entry in entries
            if (entry.number, heads[entry.id]) in uploads
        }
        shas = {run.sha for run in runs if run.sha is not None}
        shas |= set(heads.values()) - {UNREAD_HEAD}
        statuses = uow.statuses.states_for_shas(repository.id, shas)
        # Uploaded JUnit results, only when the queue would use them: for the failed runs'
        # heads alone (a few rows), and whether the repository uploads at all.
        uses_test_results = queue.config.flaky_failures is not FlakyFailures.OFF
        test_failures = (
            failed_run_tests(uow.flaky, repository.id, runs) if uses_test_results else {}
        )
        state = EngineState(
            queue=queue,
            entries=entries,
            runs=runs,
            failed_runs=failed,
            targets=targets,
            statuses=statuses,
            test_failures=test_failures,
            in_flight=tuple(effect for _, effect in uow.effects.list(queue.id)),
        )
        policy = Policy(
            has_built_in_ci=repository.ci_command is not None,
            test_branch_prefix=repository.test_branch_prefix,
            uploads_test_results=(
                uses_test_results and uploads_test_results(uow.flaky, repository.id, now=now)
            ),
        )
        return Loaded(repository, state, policy)

    def advance(self, uow: UnitOfWork, queue: Queue, event: Event) -> Decision:
        """Decide `event` for `queue` and write the result into the caller's transaction."""
        return self.write(uow, self.plan(uow, queue, event))

    def plan(self, uow: UnitOfWork, queue: Queue, event: Event) -> Planned:
        """Decide `event` for `queue` as `uow` reads it, writing nothing (see `write`)."""
        now = self._clock()
        read = [one.info for one in event.reads] if isinstance(event, PrsRead) else []
        loaded = self.load(uow, queue, now=now, read=read)
        return Planned(loaded, event, decide(loaded.state, event, now=now, policy=loaded.policy))

    def write(self, uow: UnitOfWork, planned: Planned) -> Decision:
        """Write a decision into the caller's transaction, which holds the queue: one planned
        in it, or in a transaction before it when nothing it was decided on has changed since
        (the queue's `decision_version`).
        """
        loaded, event, decision = planned.loaded, planned.event, planned.decision
        self._persist(uow, loaded.state, decision)
        uow.on_commit(lambda: log_decision(loaded.repository, loaded.state, event, decision))
        return decision

    def enter(
        self,
        uow: UnitOfWork,
        repository: Repository,
        entry: QueueEntry,
        previous: QueueEntry | None,
    ) -> QueueEntry:
        """Write a PR entering the queue for a new episode, `not_ready`, into the caller's
        transaction (the caller holds the queue row lock). Entering changes nothing else in the
        queue, so nothing is decided here: the worker reads the PR and admits it. The entry
        as written.
        """
        if previous is None:
            return self.enter_new(uow, repository, (entry,))[0]
        entered, change = entering(entry, previous.state, self._clock())
        uow.entries.save(entered)
        self._entered(uow, repository, ((entered, change),))
        return entered

    def enter_new(
        self, uow: UnitOfWork, repository: Repository, entries: Sequence[QueueEntry]
    ) -> list[QueueEntry]:
        """`enter` for PRs the queue has never had, written together: the entries as written."""
        changed = self.entering_new(entries)
        uow.entries.add_all([entered for entered, _change in changed])
        self._entered(uow, repository, changed)
        return [entered for entered, _change in changed]

    def entering_new(self, entries: Sequence[QueueEntry]) -> list[tuple[QueueEntry, StateChange]]:
        """PRs the queue has never had as they enter it, with their history lines, for a
        caller that writes them itself (the merge button's write, `FirstEntries`), and then
        tells `entered` what it wrote.
        """
        now = self._clock()
        return [entering(entry, None, now) for entry in entries]

    def entered(
        self, repository: Repository | RepoRef, changed: Sequence[tuple[QueueEntry, StateChange]]
    ) -> None:
        """Count and log PRs that entered their queue, once written."""
        self._telemetry.decided(tuple(change for _entered, change in changed), ())
        for entered, change in changed:
            log_entered(repository, entered.base_branch, entered, change)

    def _entered(
        self,
        uow: UnitOfWork,
        repository: Repository,
        changed: Sequence[tuple[QueueEntry, StateChange]],
    ) -> None:
        uow.history.add_all([change for _entered, change in changed])
        uow.on_commit(lambda: self.entered(repository, changed))

    def _persist(self, uow: UnitOfWork, before: EngineState, decision: Decision) -> None:
        after = decision.state
        if after.queue != before.queue:
            uow.queues.save(after.queue)
        old_entries = {entry.id: entry for entry in before.entries}
        changed = [
            entry
            for entry in (*after.entries, *decision.departed)
            if old_entries.get(entry.id) != entry
        ]
        if changed:
            uow.entries.save_all(changed)
        old_runs = {run.id: run for run in before.runs}
        transitions = []
        for run in (*after.runs, *decision.closed_runs):
            old = old_runs.get(run.id)
            self._save_run(uow, old, run)
            if old is None or old.status is not run.status:
                transitions.append(RunTransition(old, run))
        if decision.changes:
            uow.history.add_all(decision.changes)
        now = self._clock()
        for effect in decision.effects:
            uow.effects.add(after.queue.id, effect, now)
        if decision.changes or transitions:
            changes = tuple(decision.changes)
            # Counted when the caller commits: a decision rolled back (a lost lease, a
            # conflict) never happened.
            uow.on_commit(lambda: self._telemetry.decided(changes, transitions))

    @staticmethod
    def _save_run(uow: UnitOfWork, old: TestRun | None, run: TestRun) -> None:
        if old is None:
            uow.test_runs.add(run)
            return
        if old == run:
            return
        uow.test_runs.save(run)
        if old.members != run.members:
            uow.test_runs.save_members(run)


def live_entries(uow: UnitOfWork, queue_id: QueueId) -> tuple[QueueEntry, ...]:
    """The queue's entries that are not in a terminal state."""
    return tuple(uow.entries.list_for_queues([queue_id], states=_LIVE_STATES))
