"""Queue order: started entries keep admission order; waiting ones sort by priority."""

from __future__ import annotations

import random
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from keepgreen.core.enums import Mergeability, PrState, StateReason
from keepgreen.core.ids import PullRequestId, QueueId
from keepgreen.core.model import QueueEntry, Readiness
from keepgreen.core.ordering import queue_order
from keepgreen.core.priority import priority_from_value

STARTED = {PrState.TESTING, PrState.TESTS_PASSED, PrState.PENDING_FAILURE}
NOW = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def entry(
    number: int, state: PrState, *, priority: int = 100, position: int | None = None
) -> QueueEntry:
    return QueueEntry(
        id=PullRequestId(f"id-{number:04d}"),
        queue_id=QueueId("q"),
        number=number,
        state=state,
        state_changed_at=NOW,
        state_reason=StateReason.SUBMITTED,
        priority=priority_from_value(priority),
        no_batch=False,
        head_sha="ab" * 20,
        title=f"PR {number}",
        author="ada",
        base_branch="main",
        readiness=Readiness(
            does_base_branch_match=True,
            mergeability=Mergeability.MERGEABLE,
            requires_impacted_targets=False,
            has_impacted_targets=False,
        ),
        is_submitted=True,
        force_enqueued=False,
        position=number if position is None else position,
        submitted_at=NOW,
    )


def numbers(entries: tuple[QueueEntry, ...]) -> list[int]:
    return [e.number for e in entries]


def test_empty_queue_has_empty_order() -> None:
    assert queue_order([]) == ()


def test_not_ready_and_terminal_entries_are_not_in_the_queue() -> None:
    entries = [
        entry(1, PrState.NOT_READY),
        entry(2, PrState.PENDING),
        entry(3, PrState.MERGED),
        entry(4, PrState.FAILED),
        entry(5, PrState.CANCELLED),
        entry(6, PrState.TESTING),
    ]
    assert numbers(queue_order(entries)) == [6, 2]


def test_equal_priority_waits_in_admission_order() -> None:
    entries = [entry(n, PrState.PENDING, position=p) for n, p in ((1, 30), (2, 10), (3, 20))]
    assert numbers(queue_order(entries)) == [2, 3, 1]


def test_lower_priority_value_goes_first_among_waiting() -> None:
    entries = [
        entry(1, PrState.PENDING, priority=200),
        entry(2, PrState.PENDING, priority=100),
        entry(3, PrState.PENDING, priority=0),
        entry(4, PrState.PENDING, priority=10),
    ]
    assert numbers(queue_order(entries)) == [3, 4, 2, 1]


def test_started_entries_stay_ahead_of_urgent_waiting_ones() -> None:
    entries = [
        entry(1, PrState.TESTING, priority=200),
        entry(2, PrState.PENDING, priority=0),
        entry(3, PrState.TESTS_PASSED, priority=255),
        entry(4, PrState.PENDING_FAILURE, priority=100),
    ]
    assert numbers(queue_order(entries)) == [1, 3, 4, 2]


def test_priority_does_not_reorder_started_entries() -> None:
    entries = [entry(1, PrState.TESTING, priority=200), entry(2, PrState.TESTING, priority=0)]
    assert numbers(queue_order(entries)) == [1, 2]


def test_order_does_not_depend_on_input_order() -> None:
    entries = [entry(n, PrState.PENDING, priority=(n * 37) % 256) for n in range(1, 30)]
    shuffled = entries[:]
    random.Random(4).shuffle(shuffled)  # noqa: S311 (a fixed shuffle, not a secret)
    assert queue_order(shuffled) == queue_order(entries)


states = st.sampled_from(list(PrState))


@st.composite
def queues(draw: st.DrawFn) -> list[QueueEntry]:
    count = draw(st.integers(min_value=0, max_value=25))
    positions = draw(st.lists(st.integers(0, 1000), min_size=count, max_size=count, unique=True))
    return [
        entry(
            number,
            draw(states),
            priority=draw(st.integers(0, 255)),
            position=position,
        )
        for number, position in enumerate(positions, start=1)
    ]


@given(queues(), st.randoms())
def test_queue_order_is_a_permutation_of_admitted_entries(
    entries: list[QueueEntry], rnd: random.Random
) -> None:
    rnd.shuffle(entries)
    ordered = queue_order(entries)
    admitted = [e for e in entries if e.state.is_admitted]
    assert len(ordered) == len(admitted)
    assert sorted(e.id for e in ordered) == sorted(e.id for e in admitted)


@given(queues())
def test_started_entries_always_precede_waiting_ones(entries: list[QueueEntry]) -> None:
    flags = [e.state in STARTED for e in queue_order(entries)]
    assert flags == sorted(flags, reverse=True)


@given(queues())
def test_started_by_position_and_waiting_by_priority_then_position(
    entries: list[QueueEntry],
) -> None:
    ordered = queue_order(entries)
    started = [e for e in ordered if e.state in STARTED]
    waiting = [e for e in ordered if e.state not in STARTED]
    assert [e.position for e in started] == sorted(e.position for e in started)
    keys = [(e.priority.value, e.position) for e in waiting]
    assert keys == sorted(keys)
    assert all(e.state is PrState.PENDING for e in waiting)


@given(queues(), st.randoms())
def test_queue_order_is_deterministic_under_shuffling(
    entries: list[QueueEntry], rnd: random.Random
) -> None:
    shuffled = entries[:]
    rnd.shuffle(shuffled)
    assert queue_order(shuffled) == queue_order(entries)
