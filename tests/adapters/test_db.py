"""The db adapter on real SQLite and PostgreSQL: migrations, types, repositories, transactions."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from keepgreen.adapters.db.engine import make_engine
from keepgreen.adapters.db.tables import Base
from keepgreen.app.errors import Conflict
from keepgreen.bootstrap import Container
from keepgreen.core.enums import CommitState, PrState, StateReason, TestRunKind, TestRunStatus
from keepgreen.core.ids import OrgId, PullRequestId, TestRunId
from keepgreen.core.model import CommitStatus, ImpactedTargets, Queue, QueueConfig, Repository
from tests.conftest import FakeClock
from tests.support.builders import T0, make_change, make_entry, make_queue, make_run
from tests.support.gitrepo import GitRepo
from tests.support.wire import REPO


def test_migrations_produce_exactly_the_models(database_url: str) -> None:
    engine = make_engine(database_url)
    with engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    engine.dispose()
    assert differences == []


@pytest.fixture
def repository(container: Container, git_repo: GitRepo) -> Repository:
    return container.admin.add_repository(
        org_slug="acme", ref=REPO, git_url=str(git_repo.path), ci_command="make test"
    )


@pytest.fixture
def queue(container: Container, repository: Repository) -> Queue:
    """acme's `main` queue, stored; the builders' default queue, so `make_entry()` is in it."""
    made = make_queue(
        repository_id=repository.id,
        config=QueueConfig(required_statuses=("ci/build", "ci/lint")),
    )
    with container.unit_of_work() as uow:
        uow.queues.add(made)
        uow.commit()
    return made


def test_a_queue_round_trips_with_its_whole_configuration(
    container: Container, queue: Queue
) -> None:
    with container.unit_of_work() as uow:
        loaded = uow.queues.find(queue.repository_id, "main")
    assert loaded == queue


def test_times_come_back_aware_and_in_utc(container: Container, queue: Queue) -> None:
    """A time stored from another zone reads back as the same instant, in UTC."""
    eastern = datetime(2026, 11, 2, 4, 0, tzinfo=UTC).astimezone(
        __import__("zoneinfo").ZoneInfo("America/New_York")
    )
    with container.unit_of_work() as uow:
        uow.queues.save(replace(queue, updated_at=eastern))
        uow.commit()
    with container.unit_of_work() as uow:
        loaded = uow.queues.find(queue.repository_id, "main")
    assert loaded is not None
    assert loaded.updated_at == eastern
    assert loaded.updated_at.tzinfo == UTC


def test_positions_are_a_strict_sequence_per_queue(container: Container, queue: Queue) -> None:
    with container.unit_of_work() as uow:
        positions = [uow.queues.next_position(queue.id) for _ in range(5)]
        uow.commit()
    with container.unit_of_work() as uow:
        positions.append(uow.queues.next_position(queue.id))
    assert positions == [1, 2, 3, 4, 5, 6]


def test_entries_added_together_read_back(container: Container, queue: Queue) -> None:
    added = [make_entry(number=number) for number in (4, 2)]
    with container.unit_of_work() as uow:
        uow.entries.add_all(added)
        uow.commit()
    with container.unit_of_work() as uow:
        assert [uow.entries.find(queue.id, number) for number in (1, 2, 3, 4)] == [
            None,
            added[1],
            None,
            added[0],
        ]


def test_leaving_without_commit_rolls_back(container: Container, queue: Queue) -> None:
    with container.unit_of_work() as uow:
        uow.entries.add(make_entry(number=1))
    with container.unit_of_work() as uow:
        assert uow.entries.find(queue.id, 1) is None


def test_a_duplicate_entry_is_a_conflict_not_a_crash(container: Container, queue: Queue) -> None:
    with container.unit_of_work() as uow:
        uow.entries.add(make_entry(number=1))
        uow.commit()
    duplicate = make_entry(
        number=1, position=2, id=PullRequestId("ffffffff-0000-0000-0000-000000000001")
    )
    with pytest.raises(Conflict) as raised:  # noqa: PT012, SIM117 (the unit of work is the subject)
        with container.unit_of_work() as uow:
            uow.entries.add(duplicate)
            uow.commit()
    assert raised.value.code == "concurrent_write"


def test_pages_walk_every_entry_once_in_position_order(container: Container, queue: Queue) -> None:
    with container.unit_of_work() as uow:
        for number in range(1, 8):
            uow.entries.add(make_entry(number=number, position=8 - number))
        uow.commit()
    seen: list[int] = []
    cursor = None
    with container.unit_of_work() as uow:
        while True:
            page = uow.entries.page(
                queue.id, state=None, concluded_since=None, cursor=cursor, take=3
            )
            seen.extend(e.number for e in page.entries)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
    assert seen == [7, 6, 5, 4, 3, 2, 1]


def test_commit_statuses_keep_the_last_write(
    container: Container, repository: Repository, clock: FakeClock
) -> None:
    sha = "a" * 40
    for state in (CommitState.PENDING, CommitState.FAILURE, CommitState.SUCCESS):
        with container.unit_of_work() as uow:
            uow.statuses.upsert(CommitStatus(repository.id, sha, "ci", state, None, None, clock()))
            uow.commit()
    with container.unit_of_work() as uow:
        stored = uow.statuses.list_for_sha(repository.id, sha)
    assert [(s.context, s.state) for s in stored] == [("ci", CommitState.SUCCESS)]


def test_impacted_targets_keep_the_last_upload_per_head(container: Container, queue: Queue) -> None:
    with container.unit_of_work() as uow:
        uow.impacted_targets.upsert(ImpactedTargets(queue.id, 1, "ab" * 20, ("a", "b"), T0))
        uow.impacted_targets.upsert(ImpactedTargets(queue.id, 1, "ab" * 20, None, T0))
        uow.impacted_targets.upsert(ImpactedTargets(queue.id, 1, "cd" * 20, ("c",), T0))
        uow.commit()
    with container.unit_of_work() as uow:
        first = uow.impacted_targets.find(queue.id, 1, "ab" * 20)
        second = uow.impacted_targets.find(queue.id, 1, "cd" * 20)
    assert first is not None
    assert first.impacts_all
    assert second is not None
    assert second.targets == ("c",)


def test_a_test_run_keeps_its_members_in_order(container: Container, queue: Queue) -> None:
    entries = [make_entry(number=n) for n in (1, 2, 3)]
    run = make_run(
        id=TestRunId("11111111-2222-3333-4444-555555555555"),
        queue_id=queue.id,
        kind=TestRunKind.BISECTION,
        status=TestRunStatus.IN_PROGRESS,
        branch="keepgreen-merge/pr-2/11111111-2222-3333-4444-555555555555",
        sha="f" * 40,
        tested_prs=(entries[2].id, entries[1].id),
        dependent_prs=(entries[0].id,),
        required_statuses=("ci/build",),
    )
    with container.unit_of_work() as uow:
        for e in entries:
            uow.entries.add(e)
        uow.test_runs.add(run)
        uow.commit()
    with container.unit_of_work() as uow:
        assert uow.test_runs.get(queue.id, run.id) == run
        assert [r.id for r in uow.test_runs.list_active([queue.id])] == [run.id]
        assert uow.test_runs.kinds([run.id]) == {run.id: TestRunKind.BISECTION}
        uow.test_runs.save(
            replace(run, status=TestRunStatus.SUCCEEDED, finished_at=T0 + timedelta(minutes=3))
        )
        uow.commit()
    with container.unit_of_work() as uow:
        assert uow.test_runs.list_active([queue.id]) == []


def test_history_since_returns_whole_histories_of_recent_entries(
    container: Container, queue: Queue
) -> None:
    old, recent = make_entry(number=1), make_entry(number=2)
    with container.unit_of_work() as uow:
        uow.entries.add(old)
        uow.entries.add(recent)
        for e, at in ((old, T0), (recent, T0), (recent, T0 + timedelta(hours=2))):
            uow.history.add(make_change(pull_request_id=e.id, to_state=PrState.PENDING, at=at))
        uow.commit()
    with container.unit_of_work() as uow:
        changes = uow.history.list_since([queue.id], T0 + timedelta(hours=1))
    assert [(c.pull_request_id, c.at) for c in changes] == [
        (recent.id, T0),
        (recent.id, T0 + timedelta(hours=2)),
    ]


def test_an_entry_history_reads_back_oldest_first(container: Container, queue: Queue) -> None:
    pr = make_entry(number=1)
    steps = [(PrState.NOT_READY, T0 + timedelta(minutes=2)), (PrState.PENDING, T0)]
    with container.unit_of_work() as uow:
        uow.entries.add(pr)
        for state, at in steps:
            uow.history.add(make_change(pull_request_id=pr.id, to_state=state, at=at))
        uow.commit()
    with container.unit_of_work() as uow:
        history = uow.history.list_for_entry(pr.id)
        last = uow.history.last_for_entry(pr.id)
        nothing = uow.history.last_for_entry(make_entry(number=2).id)
    assert [(c.to_state, c.at) for c in history] == sorted(steps, key=lambda step: step[1])
    assert last == history[-1]
    assert nothing is None


def test_deleting_a_queue_removes_everything_under_it(container: Container, queue: Queue) -> None:
    e = make_entry(number=1, state=PrState.MERGED)
    with container.unit_of_work() as uow:
        uow.entries.add(e)
        uow.history.add(
            make_change(
                pull_request_id=e.id, to_state=PrState.MERGED, reason=StateReason.MERGED_BY_QUEUE
            )
        )
        uow.impacted_targets.upsert(ImpactedTargets(queue.id, 1, "ab" * 20, ("a",), T0))
        uow.commit()
    with container.unit_of_work() as uow:
        uow.queues.delete(queue.id)
        uow.commit()
    with container.unit_of_work() as uow:
        assert uow.queues.find(queue.repository_id, "main") is None
        assert uow.entries.find(queue.id, 1) is None
        assert uow.impacted_targets.find(queue.id, 1, "ab" * 20) is None


def test_tokens_are_stored_hashed(container: Container) -> None:
    token = container.admin.create_token("initech")
    org = container.admin.authenticate(token)
    assert org is not None
    from keepgreen.app.admin import hash_token

    with container.unit_of_work() as uow:
        stored = uow.tokens.find_by_hash(hash_token(token))
        assert stored is not None
        assert stored.org_id == OrgId(org)
        assert token not in stored.token_hash
    assert container.admin.authenticate(token[:-1] + ("A" if token[-1] != "A" else "B")) is None
