"""Outages told once, then reminded with backoff: a log that does not repeat itself every second.

A git host that cannot be read fails every pass, once a second. `Outages` says when such a
failure is worth a line: its first occurrence, then reminders 1, 2, 4, ... minutes apart (at
most every `max_interval` seconds), and the recovery, with how long it lasted.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from enum import Enum


class Notice(Enum):
    """What a failure or success of a source is worth saying."""

    STARTED = "started"  # the first failure after a success (or ever)
    REMINDER = "reminder"  # still failing, and a reminder is due
    QUIET = "quiet"  # still failing, reminded recently; or fine, and was fine
    ENDED = "ended"  # fine again after failing


@dataclass(slots=True)
class _Outage:
    since: float
    failures: int
    next_reminder: float
    interval: float


class Outages:
    """Tracks failing sources (queues, hosts) by key; `now` is a monotonic clock in seconds."""

    def __init__(
        self,
        *,
        now: Callable[[], float],
        first_interval: float = 60.0,
        max_interval: float = 900.0,
    ) -> None:
        self._now = now
        self._first = first_interval
        self._max = max_interval
        self._open: dict[Hashable, _Outage] = {}

    def failed(self, key: Hashable) -> Notice:
        """Record a failure of `key`: STARTED, REMINDER (a reminder is due) or QUIET."""
        now = self._now()
        outage = self._open.get(key)
        if outage is None:
            self._open[key] = _Outage(now, 1, now + self._first, self._first)
            return Notice.STARTED
        outage.failures += 1
        if now < outage.next_reminder:
            return Notice.QUIET
        outage.interval = min(outage.interval * 2, self._max)
        outage.next_reminder = now + outage.interval
        return Notice.REMINDER

    def succeeded(self, key: Hashable) -> Notice:
        """Record a success of `key`: ENDED if it was failing, else QUIET."""
        return Notice.ENDED if self._open.pop(key, None) is not None else Notice.QUIET

    def seconds_down(self, key: Hashable) -> float:
        """How long `key` has been failing (0 when it is not)."""
        outage = self._open.get(key)
        return 0.0 if outage is None else self._now() - outage.since

    def failures(self, key: Hashable) -> int:
        """Failures of `key` in its current outage (0 when it is not failing)."""
        outage = self._open.get(key)
        return 0 if outage is None else outage.failures


__all__ = ["Notice", "Outages"]
