"""What happens to a queue: user requests, code host and CI observations, effect results.

The scheduler reacts to each the same way whether it arrives once, late or twice: every event
is checked against the state it finds (a result for a run that is no longer open is ignored).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from keepgreen.core.enums import PrState, StateReason
from keepgreen.core.ids import TestRunId
from keepgreen.core.model import ChainLink, PullRequestInfo, Queue, QueueEntry, Readiness


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passed: timeouts, batching waits and admission are re-evaluated."""


@dataclass(frozen=True, slots=True)
class EntrySubmitted:
    """A PR was submitted. `new_episode`: it enters as `not_ready` (coming from
    `previous_state`, None the first time); otherwise a live entry gets new options.
    """

    entry: QueueEntry
    new_episode: bool = True
    previous_state: PrState | None = None


@dataclass(frozen=True, slots=True)
class UserCancelled:
    """Someone asked to take the PR out of the queue."""

    number: int
    reason: StateReason = StateReason.CANCELED_BY_USER


@dataclass(frozen=True, slots=True)
class RestartRequested:
    """Re-run the tests of a PR that is testing or decided."""

    number: int


@dataclass(frozen=True, slots=True)
class ImpactedTargetsSet:
    """Targets were uploaded for a PR head (`targets is None`: it impacts everything)."""

    number: int
    head_sha: str
    targets: tuple[str, ...] | None


@dataclass(frozen=True, slots=True)
class ReadinessChanged:
    """The code host's view of a PR changed (mergeability, up to date with the target)."""

    number: int
    readiness: Readiness
    is_up_to_date: bool


@dataclass(frozen=True, slots=True)
class PrRead:
    """What the code host said of a PR submitted without reading it (the submit answers at
    once; the worker reads): its head, title, author and branch, and whether it merges.
    """

    info: PullRequestInfo
    readiness: Readiness
    is_up_to_date: bool


@dataclass(frozen=True, slots=True)
class PrsRead:
    """The PRs submitted since the worker's last pass were read: all in one decision, so that
    a burst of submits costs the queue one load and one write, not one per PR.
    """

    reads: tuple[PrRead, ...]


@dataclass(frozen=True, slots=True)
class PrHeadMoved:
    """New commits were pushed to a queued PR: it leaves the queue (`pushed_to`)."""

    number: int
    head_sha: str


@dataclass(frozen=True, slots=True)
class PrClosed:
    """A queued PR's ref disappeared: it leaves the queue (`pr_closed`; `pr_not_found` when
    the PR submitted was never found).
    """

    number: int
    reason: StateReason = StateReason.PR_CLOSED


@dataclass(frozen=True, slots=True)
class StatusReported:
    """A commit status was stored; the state already holds it. Wakes the scheduler."""

    sha: str


@dataclass(frozen=True, slots=True)
class TargetBranchMoved:
    """The target branch is at `sha`, and not because the queue moved it."""

    sha: str


@dataclass(frozen=True, slots=True)
class QueueConfigChanged:
    """`updateQueue` changed the queue's state, mode or settings."""

    queue: Queue


@dataclass(frozen=True, slots=True)
class TestCommitBuilt:
    """A run's test commit exists and its branch is pushed."""

    __test__ = False

    run_id: TestRunId
    base_tree: str
    links: tuple[ChainLink, ...]


@dataclass(frozen=True, slots=True)
class TestCommitConflict:
    """Building a run's test commit stopped: PR `number` does not merge onto the steps before."""

    __test__ = False

    run_id: TestRunId
    number: int


@dataclass(frozen=True, slots=True)
class Landed:
    """The target branch moved to `new_tip`, landing PR `number`."""

    number: int
    new_tip: str


# Landings the worker did not try: the PR was closed, or pushed to, since a pass read it.
LAND_PR_CLOSED = "pr_closed"
LAND_PUSHED_TO = "pushed_to"


@dataclass(frozen=True, slots=True)
class LandRefused:
    """Landing PR `number` was refused: `target_moved` (the branch is at `tip`, not where the
    queue expected), `conflict` (the tested change does not apply to the branch),
    `tree_mismatch` (the branch's tree is not the one the run was built on), or not tried:
    `pr_closed` or `pushed_to` (the PR changed since it was read; it leaves the queue as it
    would have at the next read).
    """

    number: int
    problem: str
    tip: str | None = None


@dataclass(frozen=True, slots=True)
class CiLost:
    """The built-in CI of run `run_id` stopped without reporting: the worker process running it
    died (or stopped). The run starts again (`ci_lost`); it is not failed.
    """

    run_id: TestRunId


Event: TypeAlias = (
    Tick
    | EntrySubmitted
    | UserCancelled
    | RestartRequested
    | ImpactedTargetsSet
    | ReadinessChanged
    | PrHeadMoved
    | PrsRead
    | PrClosed
    | StatusReported
    | TargetBranchMoved
    | QueueConfigChanged
    | TestCommitBuilt
    | TestCommitConflict
    | Landed
    | LandRefused
    | CiLost
)
