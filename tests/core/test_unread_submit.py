"""A PR submitted without reading the code host: it enters `not_ready` unread, and the worker's
read (`PrRead`) fills in its head and admits it, or `PrClosed(pr_not_found)` sends it away.
"""

from __future__ import annotations

from dataclasses import replace

from keepgreen.core.enums import Mergeability, PrState, QueueMode, QueueState, StateReason
from keepgreen.core.ids import PullRequestId
from keepgreen.core.model import (
    UNREAD_HEAD,
    PullRequestInfo,
    QueueConfig,
    QueueEntry,
    recorded_branch,
)
from keepgreen.core.scheduler import (
    EntrySubmitted,
    ImpactedTargetsSet,
    PrClosed,
    PrHeadMoved,
    PrRead,
    PrsRead,
    QueueConfigChanged,
    Tick,
    entering,
)
from keepgreen.simulation.world import SimulatedWorld
from tests.support.builders import make_entry, make_readiness


def unread(sim: SimulatedWorld, number: int) -> QueueEntry:
    """PR `number` as the submit writes it: no head, title or author, mergeability unknown."""
    return make_entry(
        number=number,
        id=PullRequestId(f"pr-{number}"),  # the simulated world's ids
        queue_id=sim.state.queue.id,
        state=PrState.NOT_READY,
        state_reason=StateReason.SUBMITTED,
        state_changed_at=sim.now,
        submitted_at=sim.now,
        head_sha=UNREAD_HEAD,
        title="",
        author="",
        readiness=make_readiness(
            mergeability=Mergeability.UNSPECIFIED,
            requires_impacted_targets=sim.state.queue.mode is QueueMode.PARALLEL,
        ),
    )


def read(sim: SimulatedWorld, number: int, *, mergeable: bool = True) -> PrsRead:
    entry = next(e for e in sim.state.entries if e.number == number)
    mergeability = Mergeability.MERGEABLE if mergeable else Mergeability.NOT_MERGEABLE
    info = PullRequestInfo(number, sim.head_sha(number), f"PR {number}", "ada", f"feature-{number}")
    readiness = replace(entry.readiness, mergeability=mergeability)
    return PrsRead((PrRead(info, readiness, is_up_to_date=False),))


def state_of(sim: SimulatedWorld, number: int) -> QueueEntry:
    return next(e for e in (*sim.state.entries, *sim.final.values()) if e.number == number)


def test_an_unread_pr_waits_not_ready_and_starts_nothing() -> None:
    sim = SimulatedWorld(config=QueueConfig())
    sim.feed(EntrySubmitted(unread(sim, 1)))
    sim.feed(Tick())
    entry = state_of(sim, 1)
    assert (entry.state, entry.is_read) == (PrState.NOT_READY, False)
    assert sim.state.runs == ()
    assert sim.outbox == []


def test_reading_fills_in_the_pr_and_admits_it_in_the_same_decision() -> None:
    sim = SimulatedWorld(config=QueueConfig())
    sim.feed(EntrySubmitted(unread(sim, 1)))
    sim.feed(read(sim, 1))
    entry = state_of(sim, 1)
    assert (entry.head_sha, entry.title, entry.author, entry.head_branch) == (
        sim.head_sha(1),
        "PR 1",
        "ada",
        "feature-1",
    )
    assert entry.readiness.mergeability is Mergeability.MERGEABLE
    assert entry.state is PrState.TESTING  # admitted, and the free slot tests it at once
    assert [(c.to_state, c.reason) for c in sim.history][:2] == [
        (PrState.NOT_READY, StateReason.SUBMITTED),
        (PrState.PENDING, StateReason.READY),
    ]


def test_a_pr_read_unmergeable_stays_not_ready() -> None:
    sim = SimulatedWorld(config=QueueConfig())
    sim.feed(EntrySubmitted(unread(sim, 1)))
    sim.feed(read(sim, 1, mergeable=False))
    entry = state_of(sim, 1)
    assert (entry.state, entry.is_read) == (PrState.NOT_READY, True)
    assert entry.readiness.mergeability is Mergeability.NOT_MERGEABLE


def test_a_second_read_changes_nothing_once_read() -> None:
    sim = SimulatedWorld(config=QueueConfig())
    sim.feed(EntrySubmitted(unread(sim, 1)))
    first = read(sim, 1)
    sim.feed(first)
    (one,) = first.reads
    sim.feed(PrsRead((replace(one, info=replace(one.info, head_sha="f" * 40, title="moved")),)))
    entry = state_of(sim, 1)
    assert (entry.head_sha, entry.title) == (sim.head_sha(1), "PR 1")


def test_a_pr_the_code_host_does_not_have_leaves_as_pr_not_found() -> None:
    sim = SimulatedWorld(config=QueueConfig())
    sim.feed(EntrySubmitted(unread(sim, 1)))
    sim.feed(PrClosed(1, StateReason.PR_NOT_FOUND))
    entry = state_of(sim, 1)
    assert (entry.state, entry.state_reason) == (PrState.CANCELLED, StateReason.PR_NOT_FOUND)


def test_a_head_moved_before_the_read_does_not_cancel_the_unread_pr() -> None:
    """A push seen (a GitHub webhook) before the worker read the PR has no head to move from."""
    sim = SimulatedWorld(config=QueueConfig())
    sim.feed(EntrySubmitted(unread(sim, 1)))
    sim.feed(PrHeadMoved(1, "a" * 40))
    assert state_of(sim, 1).state is PrState.NOT_READY
    sim.feed(read(sim, 1))
    assert state_of(sim, 1).state is PrState.TESTING


def test_a_paused_queue_keeps_a_read_pr_not_ready() -> None:
    sim = SimulatedWorld(config=QueueConfig())
    sim.feed(QueueConfigChanged(replace(sim.state.queue, state=QueueState.PAUSED)))
    sim.feed(EntrySubmitted(unread(sim, 1)))
    sim.feed(read(sim, 1))
    entry = state_of(sim, 1)
    assert (entry.state, entry.is_read) == (PrState.NOT_READY, True)


def test_in_parallel_mode_a_read_pr_waits_for_the_targets_of_its_head() -> None:
    sim = SimulatedWorld(config=QueueConfig(), mode=QueueMode.PARALLEL)
    sim.feed(EntrySubmitted(unread(sim, 1)))
    sim.feed(read(sim, 1))
    assert state_of(sim, 1).state is PrState.NOT_READY
    sim.feed(ImpactedTargetsSet(1, sim.head_sha(1), ("a",)))
    assert state_of(sim, 1).state is PrState.TESTING


def test_entering_is_not_ready_submitted_with_its_history_line() -> None:
    sim = SimulatedWorld(config=QueueConfig())
    entry = replace(unread(sim, 3), state=PrState.FAILED, verified_by_test_run=None)
    entered, change = entering(entry, PrState.FAILED, sim.now)
    assert (entered.state, entered.state_reason, entered.state_changed_at) == (
        PrState.NOT_READY,
        StateReason.SUBMITTED,
        sim.now,
    )
    assert (change.from_state, change.to_state, change.reason) == (
        PrState.FAILED,
        PrState.NOT_READY,
        StateReason.SUBMITTED,
    )


def test_a_branch_longer_than_a_stored_name_is_not_kept() -> None:
    assert recorded_branch("feature-1") == "feature-1"
    assert recorded_branch("b" * 256) is None
    assert recorded_branch("") is None


def test_prs_read_together_are_admitted_in_one_decision_in_submission_order() -> None:
    sim = SimulatedWorld(config=QueueConfig(concurrency=1))
    for number in (1, 2, 3):
        sim.feed(EntrySubmitted(unread(sim, number)))
    reads = (*read(sim, 2).reads, *read(sim, 1).reads, *read(sim, 3, mergeable=False).reads)
    changes_before = len(sim.history)
    sim.feed(PrsRead(reads))
    states = {n: state_of(sim, n).state for n in (1, 2, 3)}
    assert states == {1: PrState.TESTING, 2: PrState.PENDING, 3: PrState.NOT_READY}
    admitted = [c for c in sim.history[changes_before:] if c.reason is StateReason.READY]
    assert [c.pull_request_id for c in admitted] == [PullRequestId("pr-1"), PullRequestId("pr-2")]
