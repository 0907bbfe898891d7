"""`apply_update`: how one updateQueue call changes a queue (pure, no database)."""

from __future__ import annotations

import pytest

from keepgreen.app.errors import Conflict, InvalidInput
from keepgreen.app.queues import QueueUpdate, apply_update
from keepgreen.core.enums import MergeMethod, QueueMode, QueueState
from keepgreen.core.model import Queue, QueueConfig
from tests.support.builders import make_queue


def test_only_the_given_settings_change() -> None:
    queue = make_queue()
    updated = apply_update(
        queue,
        QueueUpdate(concurrency=5, merge_method=MergeMethod.REBASE),
        has_admitted_entries=False,
    )
    assert updated.config.concurrency == 5
    assert updated.config.merge_method is MergeMethod.REBASE
    assert updated.config.batch == queue.config.batch
    assert updated.state is QueueState.RUNNING


def test_an_empty_required_statuses_list_and_delete_both_clear_and_none_keeps() -> None:
    queue = make_queue(config=QueueConfig(required_statuses=("ci",)))
    emptied = apply_update(queue, QueueUpdate(required_statuses=()), has_admitted_entries=False)
    cleared = apply_update(
        queue, QueueUpdate(delete_required_statuses=True), has_admitted_entries=False
    )
    kept = apply_update(queue, QueueUpdate(concurrency=2), has_admitted_entries=False)
    assert emptied.config.required_statuses is None
    assert cleared.config.required_statuses is None
    assert kept.config.required_statuses == ("ci",)


def test_an_empty_queue_switches_mode_at_once() -> None:
    updated = apply_update(
        make_queue(), QueueUpdate(mode=QueueMode.PARALLEL), has_admitted_entries=False
    )
    assert (updated.mode, updated.state, updated.pending_mode) == (
        QueueMode.PARALLEL,
        QueueState.RUNNING,
        None,
    )


@pytest.mark.parametrize("state", [QueueState.RUNNING, QueueState.DRAINING])
def test_a_busy_queue_switches_through_switching_modes(state: QueueState) -> None:
    updated = apply_update(
        make_queue(state=state), QueueUpdate(mode=QueueMode.PARALLEL), has_admitted_entries=True
    )
    assert (updated.mode, updated.state, updated.pending_mode) == (
        QueueMode.SINGLE,
        QueueState.SWITCHING_MODES,
        QueueMode.PARALLEL,
    )


@pytest.mark.parametrize(
    ("queue", "update"),
    [
        (make_queue(state=QueueState.PAUSED), QueueUpdate(mode=QueueMode.PARALLEL)),
        (make_queue(), QueueUpdate(state=QueueState.PAUSED, mode=QueueMode.PARALLEL)),
    ],
)
def test_a_paused_busy_queue_does_not_lose_its_pause_to_a_mode_switch(
    queue: Queue, update: QueueUpdate
) -> None:
    with pytest.raises(Conflict) as raised:
        apply_update(queue, update, has_admitted_entries=True)
    assert raised.value.code == "queue_paused"


def test_nothing_changes_while_switching_modes() -> None:
    queue = make_queue(state=QueueState.SWITCHING_MODES, pending_mode=QueueMode.PARALLEL)
    with pytest.raises(Conflict):
        apply_update(queue, QueueUpdate(concurrency=3), has_admitted_entries=True)


def test_switching_modes_cannot_be_set_by_a_client() -> None:
    with pytest.raises(InvalidInput):
        apply_update(
            make_queue(), QueueUpdate(state=QueueState.SWITCHING_MODES), has_admitted_entries=False
        )
