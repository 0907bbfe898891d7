"""The engine's storage: queue leases (one writer per queue), the effect outbox, run state."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from keepgreen.adapters.db.effects_codec import effect_from_payload, effect_to_payload
from keepgreen.adapters.db.mapping import EntriesReadAgain, entry_from_row, entry_values
from keepgreen.adapters.db.repositories import _insert_ignore
from keepgreen.adapters.db.tables import Base, QueueEntryRow, QueueLeaseRow
from keepgreen.bootstrap import Container
from keepgreen.core.enums import (
    MergeMethod,
    PrState,
    StateReason,
    TestRunKind,
    TestRunStatus,
)
from keepgreen.core.ids import PullRequestId, TestRunId
from keepgreen.core.model import ChainLink, Queue, Repository
from keepgreen.core.scheduler import (
    BuildTestCommit,
    CancelCi,
    DeleteTestBranch,
    Effect,
    Land,
    StartCi,
)
from tests.support.builders import T0, make_entry, make_queue, make_run
from tests.support.gitrepo import GitRepo
from tests.support.wire import REPO

RUN = TestRunId("11111111-2222-3333-4444-555555555555")
LINK = ChainLink(7, "a" * 40, "b" * 40, "c" * 40)
EFFECTS: list[Effect] = [
    BuildTestCommit(RUN, "d" * 40, ((1, "e" * 40), (7, "a" * 40)), "keepgreen-merge/pr-1/x"),
    DeleteTestBranch(RUN, "keepgreen-merge/pr-1/x"),
    StartCi(RUN, "f" * 40, 600),
    CancelCi(RUN),
    Land(
        entry_id=PullRequestId("e-7"),
        number=7,
        run_id=RUN,
        target_branch="main",
        expected_tip="1" * 40,
        method=MergeMethod.REBASE,
        link=LINK,
        parent_commit="2" * 40,
        parent_tree=None,
        exact=True,
        title="Add x",
        author="Ada",
        token=f"{RUN}/7",
    ),
]


@pytest.fixture
def repository(container: Container, git_repo: GitRepo) -> Repository:
    return container.admin.add_repository(
        org_slug="acme", ref=REPO, git_url=str(git_repo.path), ci_command=None
    )


@pytest.fixture
def queue(container: Container, repository: Repository) -> Queue:
    made = make_queue(repository_id=repository.id)
    with container.unit_of_work() as uow:
        uow.queues.add(made)
        uow.commit()
    return made


def acquire(container: Container, queue: Queue, holder: str, *, at: timedelta) -> bool:
    with container.unit_of_work() as uow:
        taken = uow.leases.acquire(
            queue.id, holder, now=T0 + at, until=T0 + at + timedelta(seconds=30)
        )
        uow.commit()
    return taken


def test_a_lease_has_one_holder_until_it_expires(container: Container, queue: Queue) -> None:
    assert acquire(container, queue, "worker-a", at=timedelta(0))
    assert not acquire(container, queue, "worker-b", at=timedelta(seconds=10))
    assert acquire(container, queue, "worker-a", at=timedelta(seconds=20))  # renewal
    # Renewed at 20 s, so it runs to 50 s: still held at 45 s, taken over after it.
    assert not acquire(container, queue, "worker-b", at=timedelta(seconds=45))
    assert acquire(container, queue, "worker-b", at=timedelta(seconds=51))
    assert not acquire(container, queue, "worker-a", at=timedelta(seconds=52))


def test_a_released_lease_is_free_at_once(container: Container, queue: Queue) -> None:
    assert acquire(container, queue, "worker-a", at=timedelta(0))
    with container.unit_of_work() as uow:
        uow.leases.release(queue.id, "worker-b")  # not the holder: no effect
        uow.commit()
    assert not acquire(container, queue, "worker-b", at=timedelta(seconds=1))
    with container.unit_of_work() as uow:
        uow.leases.release(queue.id, "worker-a")
        uow.commit()
    assert acquire(container, queue, "worker-b", at=timedelta(seconds=2))


def test_a_first_lease_inserted_by_another_holder_meanwhile_is_not_taken(
    container: Container, queue: Queue
) -> None:
    """Two workers find no lease row and both insert one: only the insert that made the row
    takes the lease. (Regression: on PostgreSQL the losing INSERT ... ON CONFLICT DO NOTHING
    reported success, so both workers advanced the queue together.)
    """
    values = {"queue_id": queue.id, "expires_at": T0 + timedelta(seconds=30)}
    with Session(container.engine) as session, session.begin():
        assert _insert_ignore(
            session, QueueLeaseRow, {**values, "holder": "worker-a"}, keys=("queue_id",)
        )
    with Session(container.engine) as session, session.begin():
        assert not _insert_ignore(
            session, QueueLeaseRow, {**values, "holder": "worker-b"}, keys=("queue_id",)
        )
    assert not acquire(container, queue, "worker-b", at=timedelta(seconds=1))
    assert acquire(container, queue, "worker-a", at=timedelta(seconds=1))


@pytest.mark.parametrize("effect", EFFECTS, ids=lambda e: type(e).__name__)
def test_every_effect_round_trips_through_json(effect: Effect) -> None:
    assert effect_from_payload(*effect_to_payload(effect)) == effect


def test_an_unknown_effect_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown effect kind"):
        effect_from_payload("launch_rockets", {})


def test_the_outbox_keeps_effects_in_order_until_deleted(
    container: Container, queue: Queue
) -> None:
    with container.unit_of_work() as uow:
        for effect in EFFECTS:
            uow.effects.add(queue.id, effect, T0)
        uow.commit()
    with container.unit_of_work() as uow:
        stored = uow.effects.list(queue.id)
        assert [effect for _, effect in stored] == EFFECTS
        first_id = stored[0][0]
        assert uow.effects.delete(first_id)
        uow.commit()
    with container.unit_of_work() as uow:
        assert [effect for _, effect in uow.effects.list(queue.id)] == EFFECTS[1:]
        assert not uow.effects.delete(first_id)  # a second delete finds nothing


def test_open_runs_keep_their_chain_and_close(container: Container, queue: Queue) -> None:
    entries = [make_entry(number=n) for n in (1, 7)]
    run = make_run(
        id=RUN,
        queue_id=queue.id,
        kind=TestRunKind.BISECTION,
        status=TestRunStatus.IN_PROGRESS,
        tested_prs=(entries[1].id,),
        dependent_prs=(entries[0].id,),
    )
    run = replace(
        run,
        base_tree="9" * 40,
        chain=(ChainLink(1, "e" * 40, "3" * 40, "4" * 40), LINK),
        bisection_root=TestRunId("root"),
        started_at=T0,
    )
    with container.unit_of_work() as uow:
        for entry in entries:
            uow.entries.add(entry)
        uow.test_runs.add(run)
        uow.commit()
    with container.unit_of_work() as uow:
        assert uow.test_runs.list_open(queue.id) == [run]
        failed = replace(
            run,
            status=TestRunStatus.FAILED,
            failure_reason=StateReason.TESTS_FAILED,
            closed_at=T0 + timedelta(minutes=1),
            dependent_prs=(),
        )
        uow.test_runs.save(failed)
        uow.test_runs.save_members(failed)
        uow.commit()
    with container.unit_of_work() as uow:
        assert uow.test_runs.list_open(queue.id) == []
        assert uow.test_runs.list_failed_in_bisections(queue.id, {TestRunId("root")}) == [failed]
        assert uow.test_runs.list_failed_in_bisections(queue.id, {TestRunId("other")}) == []
        # Which bisection a run belongs to, read without the run (runs outside one are left out).
        assert uow.test_runs.bisection_roots([run.id, TestRunId("unknown")]) == {
            run.id: TestRunId("root")
        }
        assert uow.test_runs.bisection_roots([]) == {}


def test_a_queue_keeps_its_target_tip_and_run_counter(container: Container, queue: Queue) -> None:
    moved = replace(queue, target_sha="a" * 40, run_seq=12)
    with container.unit_of_work() as uow:
        uow.queues.save(moved)
        uow.commit()
    with container.unit_of_work() as uow:
        assert uow.queues.get(queue.id) == moved
        assert uow.queues.list_ids() == [queue.id]


def test_a_queues_entries_read_again_are_the_rows_as_they_are_now(
    container: Container, queue: Queue
) -> None:
    entries = [make_entry(number=n, queue_id=queue.id, id=PullRequestId(f"e-{n}")) for n in (1, 2)]
    with container.unit_of_work() as uow:
        uow.entries.add_all(entries)
        uow.commit()
    with container.unit_of_work() as uow:
        first = uow.entries.list_for_queues([queue.id])
    assert list(first) == entries
    testing = replace(entries[1], state=PrState.TESTING, state_reason=StateReason.TESTS_STARTED)
    with container.unit_of_work() as uow:
        uow.entries.save(testing)
        uow.commit()
    with container.unit_of_work() as uow:
        again = uow.entries.list_for_queues([queue.id])
        live = uow.entries.list_for_queues([queue.id], states=frozenset({PrState.PENDING}))
    assert list(again) == [entries[0], testing]
    assert again[0] is first[0]  # the row unchanged: the entry built from it before
    assert list(live) == [entries[0]]


def test_entries_read_again_are_kept_for_the_latest_reads_only() -> None:
    memo = EntriesReadAgain(reads=2)
    table = QueueEntryRow.__table__
    engine = create_engine("sqlite://")
    table.metadata.create_all(engine, tables=[table, Base.metadata.tables["queues"]])
    values = {"id": "e-1", **entry_values(make_entry())}
    with engine.begin() as connection:
        connection.execute(table.insert(), [values])
        rows = connection.execute(select(table)).all()
    first = memo.entries("a", rows)
    assert memo.entries("a", rows)[0] is first[0]
    memo.entries("b", rows)
    memo.entries("c", rows)  # "a" is the least recent of three: let go
    assert memo.entries("a", rows)[0] is not first[0]
    assert memo.entries("a", rows)[0] == first[0] == entry_from_row(rows[0])
