"""Queue order: urgent entries lead; started entries keep admission order; waiting ones sort
by priority."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keepgreen.core.enums import PrState
from keepgreen.core.model import QueueEntry
from keepgreen.core.ordering import queue_order
from tests.support.builders import make_entry

STARTED = {PrState.TESTING, PrState.TESTS_PASSED, PrState.PENDING_FAILURE}


def numbers(entries: tuple[QueueEntry, ...]) -> list[int]:
    return [e.number for e in entries]


def numbered(*specs: tuple[PrState, int]) -> list[QueueEntry]:
    """Entries 1, 2, 3, ... (admitted in that order) with these (state, priority value)."""
    return [
        make_entry(number=number, state=state, priority=priority)
        for number, (state, priority) in enumerate(specs, start=1)
    ]


def test_empty_queue_has_empty_order() -> None:
    assert queue_order([]) == ()


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        pytest.param(
            numbered(
                (PrState.NOT_READY, 100),
                (PrState.PENDING, 100),
                (PrState.MERGED, 100),
                (PrState.FAILED, 100),
                (PrState.CANCELLED, 100),
                (PrState.TESTING, 100),
            ),
            [6, 2],
            id="not_ready_and_terminal_entries_are_not_in_the_queue",
        ),
        pytest.param(
            [
                make_entry(number=n, state=PrState.PENDING, position=p)
                for n, p in ((1, 30), (2, 10), (3, 20))
            ],
            [2, 3, 1],
            id="equal_priority_waits_in_admission_order",
        ),
        pytest.param(
            numbered(
                (PrState.PENDING, 200),
                (PrState.PENDING, 100),
                (PrState.PENDING, 0),
                (PrState.PENDING, 10),
            ),
            [3, 4, 2, 1],
            id="lower_priority_value_goes_first_among_waiting",
        ),
        pytest.param(
            numbered(
                (PrState.TESTING, 200),
                (PrState.PENDING, 0),
                (PrState.TESTS_PASSED, 255),
                (PrState.PENDING_FAILURE, 100),
            ),
            [2, 1, 3, 4],
            id="urgent_waiting_entries_skip_ahead_of_started_ones",
        ),
        pytest.param(
            numbered((PrState.TESTING, 200), (PrState.TESTING, 10)),
            [1, 2],
            id="non_urgent_priority_does_not_reorder_started_entries",
        ),
        pytest.param(
            numbered((PrState.PENDING, 0), (PrState.TESTING, 0), (PrState.TESTING, 100)),
            [2, 1, 3],
            id="started_urgent_entries_stay_ahead_of_waiting_urgent_ones",
        ),
        pytest.param(
            numbered((PrState.PENDING, 100), (PrState.PENDING, 50)),
            [1, 2],
            id="entries_held_by_a_run_order_as_started",
        ),
    ],
)
def test_queue_order(
    entries: list[QueueEntry], expected: list[int], request: pytest.FixtureRequest
) -> None:
    holding = frozenset(e.id for e in entries) if "held" in request.node.name else frozenset()
    assert numbers(queue_order(entries, holding=holding)) == expected


def test_order_does_not_depend_on_input_order() -> None:
    entries = [
        make_entry(number=n, state=PrState.PENDING, priority=(n * 37) % 256) for n in range(1, 30)
    ]
    shuffled = entries[:]
    random.Random(4).shuffle(shuffled)  # noqa: S311 (a fixed shuffle, not a secret)
    assert queue_order(shuffled) == queue_order(entries)


states = st.sampled_from(list(PrState))


@st.composite
def queues(draw: st.DrawFn) -> list[QueueEntry]:
    count = draw(st.integers(min_value=0, max_value=25))
    positions = draw(st.lists(st.integers(0, 1000), min_size=count, max_size=count, unique=True))
    return [
        make_entry(
            number=number,
            state=draw(states),
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


def rank(entry: QueueEntry) -> int:
    """0 urgent started, 1 urgent waiting, 2 started, 3 waiting: the order's four bands."""
    urgent = entry.priority.value == 0
    return (0 if urgent else 2) + (0 if entry.state in STARTED else 1)


@given(queues())
def test_urgent_entries_lead_then_started_ones_then_waiting_ones(
    entries: list[QueueEntry],
) -> None:
    ranks = [rank(e) for e in queue_order(entries)]
    assert ranks == sorted(ranks)


@given(queues())
def test_started_by_position_and_waiting_by_priority_then_position(
    entries: list[QueueEntry],
) -> None:
    ordered = queue_order(entries)
    for band in (0, 1, 2):
        members = [e for e in ordered if rank(e) == band]
        assert [e.position for e in members] == sorted(e.position for e in members)
    waiting = [e for e in ordered if rank(e) == 3]
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
