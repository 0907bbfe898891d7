"""Lanes: who depends on whom, checked against the definition (every overlapping entry ahead,
and what it depends on) on random queues of targets, ALL and empty lists."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from keepgreen.core.enums import Mergeability, PrState, QueueMode, StateReason
from keepgreen.core.ids import PullRequestId, QueueId
from keepgreen.core.model import QueueEntry, Readiness
from keepgreen.core.priority import DEFAULT_PRIORITY
from keepgreen.core.scheduler.lanes import Targets, dependencies

AT = datetime(2026, 1, 1, tzinfo=UTC)


def entry(number: int) -> QueueEntry:
    return QueueEntry(
        id=PullRequestId(f"pr-{number}"),
        queue_id=QueueId("q"),
        number=number,
        state=PrState.PENDING,
        state_changed_at=AT,
        state_reason=StateReason.READY,
        priority=DEFAULT_PRIORITY,
        no_batch=False,
        head_sha=f"h{number}",
        title="",
        author="",
        base_branch="main",
        readiness=Readiness(
            does_base_branch_match=True,
            mergeability=Mergeability.MERGEABLE,
            requires_impacted_targets=True,
            has_impacted_targets=True,
        ),
        is_submitted=True,
        force_enqueued=False,
        position=number,
        submitted_at=AT,
    )


def overlap(first: Targets, second: Targets) -> bool:
    """The definition: ALL overlaps every non-empty list; lists overlap when they share one."""
    if first is None or second is None:
        return bool(first is None or first) and bool(second is None or second)
    return not set(first).isdisjoint(second)


def by_definition(
    order: list[QueueEntry], targets: dict[PullRequestId, Targets]
) -> dict[PullRequestId, tuple[PullRequestId, ...]]:
    closure: dict[PullRequestId, set[PullRequestId]] = {}
    for index, current in enumerate(order):
        found: set[PullRequestId] = set()
        for ahead in order[:index]:
            if overlap(targets.get(current.id), targets.get(ahead.id)):
                found |= {ahead.id} | closure[ahead.id]
        closure[current.id] = found
    position = {e.id: i for i, e in enumerate(order)}
    return {k: tuple(sorted(v, key=position.__getitem__)) for k, v in closure.items()}


target_lists = st.one_of(
    st.none(),
    st.lists(st.sampled_from("abcde"), max_size=3).map(tuple),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(target_lists, st.booleans()), max_size=14))
def test_parallel_dependencies_are_the_transitive_overlaps(
    plan: list[tuple[Targets, bool]],
) -> None:
    order = [entry(number) for number in range(1, len(plan) + 1)]
    # An entry without uploaded targets (absent) counts as ALL.
    targets = {e.id: t for e, (t, uploaded) in zip(order, plan, strict=True) if uploaded}
    found = dependencies(order, mode=QueueMode.PARALLEL, targets=targets)
    assert found == by_definition(order, targets)


def test_single_mode_depends_on_everything_ahead() -> None:
    order = [entry(number) for number in range(1, 4)]
    found = dependencies(order, mode=QueueMode.SINGLE, targets={})
    assert found == {
        PullRequestId("pr-1"): (),
        PullRequestId("pr-2"): (PullRequestId("pr-1"),),
        PullRequestId("pr-3"): (PullRequestId("pr-1"), PullRequestId("pr-2")),
    }
