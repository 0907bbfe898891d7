"""Reading and writing a test's database through the unit of work, for what the API does not do:
the queue engine is not part of the API tests, so the states it would set and the test runs it
would start are written here, as the engine writes them.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from keepgreen.app.ports import UnitOfWork
from keepgreen.bootstrap import Container
from keepgreen.core.enums import PrState, StateReason
from keepgreen.core.ids import TestRunId
from keepgreen.core.model import Queue, QueueEntry, RepoRef, TestRun
from tests.support.builders import make_run, transition
from tests.support.wire import REPO


def find_queue(uow: UnitOfWork, ref: RepoRef = REPO, branch: str = "main") -> Queue:
    """acme's queue of `branch` in repository `ref`, which must exist."""
    org = uow.orgs.get_by_slug("acme")
    assert org is not None
    repository = uow.repositories.find(org.id, ref)
    assert repository is not None
    queue = uow.queues.find(repository.id, branch)
    assert queue is not None
    return queue


def find_entry(uow: UnitOfWork, number: int, ref: RepoRef = REPO) -> QueueEntry:
    """PR `number`'s entry in the `main` queue of `ref`, which must exist."""
    entry = uow.entries.find(find_queue(uow, ref).id, number)
    assert entry is not None
    return entry


def entry_now(container: Container, number: int) -> QueueEntry:
    """PR `number`'s entry in the `main` queue of `REPO`, as stored now."""
    with container.unit_of_work() as uow:
        return find_entry(uow, number)


def move_entry(
    container: Container,
    number: int,
    state: PrState,
    at: datetime,
    reason: StateReason,
    test_run_id: TestRunId | None = None,
) -> QueueEntry:
    """Set PR `number`'s state at `at` as the engine would, with its history line."""
    with container.unit_of_work() as uow:
        moved, change = transition(
            find_entry(uow, number), state, reason=reason, at=at, test_run_id=test_run_id
        )
        uow.entries.save(moved)
        uow.history.add(change)
        uow.commit()
    return moved


def add_run(
    container: Container,
    *,
    tested: tuple[int, ...],
    dependent: tuple[int, ...] = (),
    at: datetime,
    **overrides: object,
) -> TestRun:
    """Store a test run of the `main` queue of `REPO` testing PRs `tested` on top of
    `dependent`, made at `at`, on the branch `trunk-merge/pr-<first tested>/<run id>`.
    """
    run_id = TestRunId(str(uuid.uuid4()))
    with container.unit_of_work() as uow:
        run = make_run(
            id=run_id,
            queue_id=find_queue(uow).id,
            branch=f"trunk-merge/pr-{tested[0]}/{run_id}",
            tested_prs=tuple(find_entry(uow, n).id for n in tested),
            dependent_prs=tuple(find_entry(uow, n).id for n in dependent),
            created_at=at,
            **overrides,
        )
        uow.test_runs.add(run)
        uow.commit()
    return run
