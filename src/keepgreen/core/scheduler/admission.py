"""Admission: PRs entering and leaving the queue by the user's hand, `not_ready` -> `pending`,
and the end of a mode switch.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from keepgreen.core.enums import (
    PrState,
    QueueMode,
    QueueState,
    StateReason,
)
from keepgreen.core.model import QueueEntry, StateChange, recorded_branch
from keepgreen.core.scheduler.effects import (
    Land,
)
from keepgreen.core.scheduler.events import PrRead
from keepgreen.core.scheduler.working import Working


def entering(
    entry: QueueEntry, previous: PrState | None, now: datetime
) -> tuple[QueueEntry, StateChange]:
    """A PR entering the queue for a new episode: `not_ready`, submitted, and its history line.
    It changes nothing else in the queue until it is ready, so it needs no decision of its own.
    """
    entered = replace(
        entry,
        state=PrState.NOT_READY,
        state_reason=StateReason.SUBMITTED,
        state_changed_at=now,
        verified_by_test_run=None,
    )
    change = StateChange(
        entry.id, entry.queue_id, previous, PrState.NOT_READY, StateReason.SUBMITTED, now
    )
    return entered, change


class Admission(Working):
    """Submit, cancel, restart, admit."""

    def submit(self, entry: QueueEntry, *, new_episode: bool, previous: PrState | None) -> None:
        live = self.entries.get(entry.id)
        if not new_episode:
            if live is not None:
                # Submitting a live entry again only updates its options.
                self.entries[entry.id] = replace(
                    live, priority=entry.priority, no_batch=entry.no_batch
                )
                self.changed = True
            return
        entered, change = entering(entry, previous, self.now)
        self.entries[entry.id] = entered
        self.changes.append(change)
        self.changed = True

    def read(self, event: PrRead) -> None:  # one of `PrsRead`
        """Fill in what the code host told of a PR submitted without reading it; a PR read
        already (a second read of the same pass, a head moved meanwhile) keeps what it has.
        """
        found = self.entry_by_number(event.info.number)
        if found is None or found.is_read:
            return
        info = event.info
        self.entries[found.id] = replace(
            found,
            head_sha=info.head_sha,
            title=info.title,
            author=info.author,
            head_branch=recorded_branch(info.head_branch),
            readiness=replace(event.readiness, has_impacted_targets=found.id in self.targets),
            is_up_to_date=event.is_up_to_date,
        )
        self.changed = True

    def cancel(self, number: int, reason: StateReason) -> None:
        entry = self.entry_by_number(number)
        if entry is None:
            return
        if any(isinstance(e, Land) and e.number == number for e in self.in_flight):
            # Its landing is under way; the result decides (a landed PR stays merged).
            return
        self.move(entry, PrState.CANCELLED, reason)

    def restart(self, number: int) -> None:
        entry = self.entry_by_number(number)
        if entry is None or not entry.state.is_started:
            return
        run = self.current_run(entry.id)
        if run is not None:
            self.invalidate(run, StateReason.RESTART_REQUESTED)
        entry = self.entries[entry.id]
        if entry.state is not PrState.PENDING or entry.verified_by_test_run is not None:
            self.move(entry, PrState.PENDING, StateReason.RESTART_REQUESTED)

    def time_out_not_ready(self) -> None:
        """A PR that is itself not ready (unmergeable, its targets missing) for the queue's
        `not_ready_timeout_hours` leaves it, cancelled. One held back only by a paused or
        draining queue waits on the queue, not on itself, and stays.
        """
        hours = self.queue.config.not_ready_timeout_hours
        if not hours:
            return
        limit = timedelta(hours=hours)
        for entry in list(self.entries.values()):
            if (
                entry.state is PrState.NOT_READY
                and not entry.readiness.is_ready
                and self.now >= entry.state_changed_at + limit
            ):
                self.move(entry, PrState.CANCELLED, StateReason.NOT_READY_TIMEOUT)

    def admit(self) -> None:
        """`not_ready` -> `pending` when ready and the queue is running."""
        if self.queue.state is not QueueState.RUNNING:
            return
        needs_targets = self.queue.mode is QueueMode.PARALLEL
        for entry in list(self.entries.values()):
            if entry.state is not PrState.NOT_READY:
                continue
            updated = self._with_targets(entry, needs_targets=needs_targets)
            if updated.readiness.is_ready:
                self.move(updated, PrState.PENDING, StateReason.READY)

    def _with_targets(self, entry: QueueEntry, *, needs_targets: bool) -> QueueEntry:
        """`entry` with its readiness as to impacted targets, kept in `entries`; copied only
        when that changes: a queue under a flood of merge buttons holds thousands of PRs not
        ready yet, and each decision walks them.
        """
        has_targets = entry.id in self.targets
        readiness = entry.readiness
        if (
            readiness.requires_impacted_targets == needs_targets
            and readiness.has_impacted_targets == has_targets
        ):
            return entry
        updated = replace(
            entry,
            readiness=replace(
                readiness, requires_impacted_targets=needs_targets, has_impacted_targets=has_targets
            ),
        )
        self.entries[entry.id] = updated
        return updated

    def finish_mode_switch(self) -> None:
        """`switching_modes` ends, in the new mode, once the queue has emptied."""
        if self.queue.state is not QueueState.SWITCHING_MODES:
            return
        if any(e.state.is_admitted for e in self.entries.values()) or self.runs:
            return
        mode = self.queue.pending_mode or self.queue.mode
        self.queue = replace(
            self.queue, state=QueueState.RUNNING, mode=mode, pending_mode=None, updated_at=self.now
        )
        self.changed = True
