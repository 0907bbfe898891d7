"""Test-data builders for the core model: every argument has a default, a test names only what
it is about (`make_entry(number=3, state=PrState.TESTING)`).

The defaults describe one plain, consistent world: a running single-mode queue `QUEUE_ID` of
repository `REPOSITORY_ID`, and PR N pending and ready in it with the id `entry_id(N)`, the head
`head_sha(N)` and admission position N. Ids are UUID-shaped so that the builders' values can be
stored by the db adapter as they are.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from keepgreen.core.enums import (
    Mergeability,
    PrState,
    QueueMode,
    QueueState,
    StateReason,
    TestRunKind,
    TestRunStatus,
)
from keepgreen.core.ids import PullRequestId, QueueId, RepositoryId, TestRunId
from keepgreen.core.model import (
    Queue,
    QueueConfig,
    QueueEntry,
    Readiness,
    StateChange,
    TestRun,
)
from keepgreen.core.priority import DEFAULT_PRIORITY, Priority, priority_from_value

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
REPOSITORY_ID = RepositoryId("00000000-0000-0000-0000-0000000000e1")
QUEUE_ID = QueueId("00000000-0000-0000-0000-000000000a01")


def entry_id(number: int) -> PullRequestId:
    """The id `make_entry(number=number)` gives its entry (ordered as the numbers are)."""
    return PullRequestId(f"00000000-0000-0000-0000-{number:012d}")


def head_sha(number: int) -> str:
    """The head sha `make_entry(number=number)` gives its entry."""
    return f"{number:040x}"


def make_readiness(**overrides: Any) -> Readiness:
    """Ready: the base branch matches, mergeable, impacted targets not required."""
    fields: dict[str, Any] = {
        "does_base_branch_match": True,
        "mergeability": Mergeability.MERGEABLE,
        "requires_impacted_targets": False,
        "has_impacted_targets": False,
    }
    return Readiness(**{**fields, **overrides})


def make_queue(**overrides: Any) -> Queue:
    """A running single-mode queue for `main` with the default configuration."""
    fields: dict[str, Any] = {
        "id": QUEUE_ID,
        "repository_id": REPOSITORY_ID,
        "branch": "main",
        "state": QueueState.RUNNING,
        "mode": QueueMode.SINGLE,
        "config": QueueConfig(),
        "created_at": T0,
        "updated_at": T0,
    }
    return Queue(**{**fields, **overrides})


def make_entry(
    *, number: int = 1, priority: Priority | int = DEFAULT_PRIORITY, **overrides: Any
) -> QueueEntry:
    """PR `number`, submitted and pending (ready) in `QUEUE_ID` at admission position `number`.

    `priority` may be given as a plain value (`priority=0`) or as a `Priority`.
    """
    fields: dict[str, Any] = {
        "id": entry_id(number),
        "queue_id": QUEUE_ID,
        "number": number,
        "state": PrState.PENDING,
        "state_changed_at": T0,
        "state_reason": StateReason.READY,
        "priority": priority if isinstance(priority, Priority) else priority_from_value(priority),
        "no_batch": False,
        "head_sha": head_sha(number),
        "title": f"PR {number}",
        "author": "ada",
        "base_branch": "main",
        "readiness": make_readiness(),
        "is_submitted": True,
        "force_enqueued": False,
        "position": number,
        "submitted_at": T0,
    }
    return QueueEntry(**{**fields, **overrides})


def make_change(*, number: int = 1, **overrides: Any) -> StateChange:
    """A history line of PR `number` (see `entry_id`): it became pending (ready) at `T0`."""
    fields: dict[str, Any] = {
        "pull_request_id": entry_id(number),
        "queue_id": QUEUE_ID,
        "from_state": None,
        "to_state": PrState.PENDING,
        "reason": StateReason.READY,
        "at": T0,
    }
    return StateChange(**{**fields, **overrides})


def transition(
    entry: QueueEntry,
    state: PrState,
    *,
    reason: StateReason,
    at: datetime,
    test_run_id: TestRunId | None = None,
) -> tuple[QueueEntry, StateChange]:
    """`entry` moved to `state` as the queue engine moves it, with the history line it writes:
    a terminal state also takes the PR out of the queue (`is_submitted` false).
    """
    moved = replace(
        entry,
        state=state,
        state_reason=reason,
        state_changed_at=at,
        is_submitted=entry.is_submitted and not state.is_terminal,
    )
    change = make_change(
        pull_request_id=entry.id,
        queue_id=entry.queue_id,
        from_state=entry.state,
        to_state=state,
        reason=reason,
        at=at,
        test_run_id=test_run_id,
    )
    return moved, change


def make_run(**overrides: Any) -> TestRun:
    """A main test run of `QUEUE_ID`, in progress, testing PR 1 on top of the target branch.

    Each call without `id` makes a new (random) id, so several runs can be stored side by side.
    """
    run_id = overrides.pop("id", None) or TestRunId(str(uuid.uuid4()))
    fields: dict[str, Any] = {
        "id": run_id,
        "queue_id": QUEUE_ID,
        "kind": TestRunKind.MAIN,
        "status": TestRunStatus.IN_PROGRESS,
        "branch": f"trunk-merge/pr-1/{run_id}",
        "base_sha": "0" * 40,
        "sha": "ab" * 20,
        "tested_prs": (entry_id(1),),
        "dependent_prs": (),
        "required_statuses": ("ci",),
        "created_at": T0,
    }
    return TestRun(**{**fields, **overrides})
