"""A failing source is told once, reminded with backoff, and its end is told."""

from __future__ import annotations

from keepgreen.app.outages import Notice, Outages


class Seconds:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_first_failure_then_reminders_with_backoff_then_recovery() -> None:
    clock = Seconds()
    outages = Outages(now=clock, first_interval=60, max_interval=300)
    told: list[tuple[float, Notice]] = []
    # One failure a second for 20 minutes, as a worker's passes over an unreadable host.
    for second in range(1200):
        clock.now = 1000.0 + second
        notice = outages.failed("h/o/n:main")
        if notice is not Notice.QUIET:
            told.append((clock.now - 1000.0, notice))
    assert told == [
        (0, Notice.STARTED),
        (60, Notice.REMINDER),  # then every 120 s, 240 s, and at most every 300 s
        (180, Notice.REMINDER),
        (420, Notice.REMINDER),
        (720, Notice.REMINDER),
        (1020, Notice.REMINDER),
    ]
    assert outages.failures("h/o/n:main") == 1200
    assert outages.seconds_down("h/o/n:main") == 1199
    assert outages.succeeded("h/o/n:main") is Notice.ENDED
    assert outages.succeeded("h/o/n:main") is Notice.QUIET
    assert outages.failures("h/o/n:main") == 0
    # A new outage starts from the first interval again.
    assert outages.failed("h/o/n:main") is Notice.STARTED


def test_sources_are_told_apart() -> None:
    outages = Outages(now=Seconds())
    assert outages.failed("a") is Notice.STARTED
    assert outages.failed("b") is Notice.STARTED
    assert outages.failed("a") is Notice.QUIET
    assert outages.succeeded("b") is Notice.ENDED
    assert outages.failures("a") == 2
