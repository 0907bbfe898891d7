"""What a queue chose from its own record: batch size, speculation depth, testing timeout.

Pure functions of the queue (its settings and `QueueStats`): the scheduler runs by them, and
`getQueue` and the metrics show the same figures, with why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from keepgreen.core.model import Queue

# The adaptive testing timeout: the queue's p95 CI time times this, plus the margin.
TIMEOUT_FACTOR = 1.25
TIMEOUT_MARGIN_SECONDS = 10 * 60
# The adaptive depth never falls below this (a failure halves it).
MIN_DEPTH = 2


def batch_size(queue: Queue) -> int:
    """`batchingMinSize`; with the adaptive batch size, round(1/sqrt(p)) for the queue's recent
    failure rate p (the size that spends the fewest runs per PR), never more.
    """
    configured = queue.config.batching_min_size
    rate = queue.stats.failure_rate() if queue.config.adaptive_batch_size else None
    if rate is None or rate <= 0:
        return configured
    return max(1, min(configured, round(1 / math.sqrt(rate))))


def depth(queue: Queue) -> int:
    """`concurrency`; with the adaptive depth, the window the queue's record allows."""
    configured = queue.config.concurrency
    window = queue.stats.depth if queue.config.adaptive_depth else None
    return configured if window is None else max(1, min(configured, window))


def next_depth(queue: Queue, *, failed: bool) -> int:
    """The window after one more main run: +1 on a pass, halved on a failure."""
    window = depth(queue)
    window = max(MIN_DEPTH, window // 2) if failed else window + 1
    return min(window, queue.config.concurrency)


def testing_timeout_seconds(queue: Queue) -> int:
    """`testingTimeoutMinutes`; with the adaptive timeout, the queue's p95 CI time plus a margin
    once it has seen enough passed runs, never more than the setting.
    """
    fixed = queue.config.testing_timeout_minutes * 60
    p95 = queue.stats.p95_ci_seconds() if queue.config.adaptive_testing_timeout else None
    if p95 is None:
        return fixed
    return min(fixed, int(p95 * TIMEOUT_FACTOR) + TIMEOUT_MARGIN_SECONDS)


@dataclass(frozen=True, slots=True)
class Chosen:
    """What the queue runs by now, and the record it chose it from."""

    batch_size: int
    depth: int
    testing_timeout_minutes: float
    failure_rate: float | None  # per PR tested, decayed; None: too few runs yet
    spurious_share: float  # the chance a failure is spurious, from its retries
    p95_ci_minutes: float | None
    why: str


def chosen(queue: Queue) -> Chosen:
    config = queue.config
    stats = queue.stats
    rate = stats.failure_rate()
    p95 = stats.p95_ci_seconds()
    reasons = []
    if config.adaptive_batch_size and config.batch:
        reasons.append(
            "batch size as configured until 20 PRs were tested"
            if rate is None
            else f"batch size 1/sqrt({rate:.3f}) capped at {config.batching_min_size}"
        )
    if config.adaptive_depth:
        reasons.append("depth +1 per passed run, halved per failed one")
    if config.adaptive_testing_timeout:
        reasons.append(
            "testing timeout as configured until 20 runs passed"
            if p95 is None
            else "testing timeout p95 x 1.25 + 10 min"
        )
    return Chosen(
        batch_size=batch_size(queue) if config.batch else 1,
        depth=depth(queue),
        testing_timeout_minutes=testing_timeout_seconds(queue) / 60,
        failure_rate=rate,
        spurious_share=stats.spurious_share,
        p95_ci_minutes=None if p95 is None else p95 / 60,
        why="; ".join(reasons) or "the configured settings",
    )
