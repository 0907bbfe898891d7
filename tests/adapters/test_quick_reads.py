"""The one-statement reads of every polled request, on held connections and pooled ones: they
see every committed write at once, check the token in the same statement, and survive a
connection the database dropped.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import psycopg
import pytest
from sqlalchemy import text

from keepgreen.adapters.db.quick_reads import HELD_CONNECTIONS, MAX_ASKED, SqlQuickReads
from keepgreen.app.admin import hash_token
from keepgreen.bootstrap import Container
from keepgreen.core.enums import PrState, QueueMode, StateReason
from keepgreen.core.ids import PullRequestId, QueueId
from keepgreen.core.model import (
    QueueAsk,
    QueueEntry,
    QueueModes,
    QueueVersion,
    RepoRef,
    StateChange,
    TokenRead,
)
from tests.conftest import PG_URL
from tests.support.builders import make_change, make_entry
from tests.support.gitrepo import GitRepo
from tests.support.wire import REPO, Api, update_queue


def on_postgresql(test: Callable[..., None]) -> Callable[..., None]:
    """A test of what PostgreSQL alone does (its connections, planner, column lengths)."""
    needs = pytest.mark.skipif(
        PG_URL is None, reason="needs KEEPGREEN_TEST_DATABASE_URL (PostgreSQL)"
    )
    return needs(pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)(test))


def version(reads: SqlQuickReads, token: str, ref: RepoRef, branch: str) -> Any:
    (found,) = asyncio.run(reads.token_queue_versions([(hash_token(token), QueueAsk(ref, branch))]))
    return found


@pytest.fixture
def reads(container: Container) -> Any:
    quick = SqlQuickReads(container.engine)
    yield quick
    quick.close()


def test_a_token_read_finds_the_orgs_queue_and_nothing_of_another_org(
    reads: SqlQuickReads, queue: Api, token: str, other_token: str
) -> None:
    found = version(reads, token, REPO, "main")
    assert found is not None
    assert found.token_hash == hash_token(token)
    assert found.found.queue_id is not None
    no_queue = version(reads, token, REPO, "release")
    assert no_queue is not None
    assert no_queue.found.queue_id is None
    assert version(reads, other_token, REPO, "main") is None
    assert version(reads, "kg_not_a_token", REPO, "main") is None
    elsewhere = RepoRef(REPO.host, REPO.owner, "other")
    assert version(reads, token, elsewhere, "main") is None


def test_many_reads_in_one_statement_answer_each_as_alone(
    reads: SqlQuickReads, queue: Api, token: str, other_token: str
) -> None:
    """65 asks (two statements of MAX_ASKED rows, then one of a single row), mixing live and
    unknown tokens, orgs, repositories and branches: each answered as if asked alone, in the
    order asked.
    """
    elsewhere = RepoRef(REPO.host, REPO.owner, "other")
    kinds = [
        (token, REPO, "main"),
        (other_token, REPO, "main"),
        (token, REPO, "release"),
        ("kg_not_a_token", REPO, "main"),
        (token, elsewhere, "main"),
    ]
    asked = [kinds[index % len(kinds)] for index in range(2 * MAX_ASKED + 1)]
    alone: list[TokenRead[QueueVersion] | None] = [version(reads, *one) for one in asked]
    together = asyncio.run(
        reads.token_queue_versions(
            [(hash_token(secret), QueueAsk(ref, branch)) for secret, ref, branch in asked]
        )
    )
    assert together == alone
    assert [found is not None for found in together[:5]] == [True, False, True, False, False]
    assert asyncio.run(reads.token_queue_versions([])) == []


def test_a_held_connection_sees_each_commit_at_once(
    reads: SqlQuickReads, queue: Api, container: Container, token: str, registered_repo: GitRepo
) -> None:
    first = version(reads, token, REPO, "main")
    assert first is not None
    registered_repo.open_pr(1, {"a.txt": "a\n"})
    assert queue.post("submitPullRequest", targetBranch="main", pr={"number": 1}).status_code == 200
    moved = version(reads, token, REPO, "main")
    assert moved is not None
    assert moved.found.version > first.found.version
    (options,) = asyncio.run(
        reads.token_queued_options([(hash_token(token), QueueAsk(REPO, "main", 1))])
    )
    assert options is not None
    assert options.found.state is not None
    with container.engine.begin() as connection:
        connection.execute(text("UPDATE api_tokens SET revoked_at = CURRENT_TIMESTAMP"))
    assert version(reads, token, REPO, "main") is None
    asked = [(hash_token(token), QueueAsk(REPO, "main", 1))]
    assert asyncio.run(reads.token_queued_options(asked)) == [None]


def test_threads_past_the_held_ones_read_from_the_pool(
    reads: SqlQuickReads, queue: Api, token: str
) -> None:
    answers: list[Any] = []

    def read() -> None:
        answers.append(version(reads, token, REPO, "main"))

    threads = [threading.Thread(target=read) for _ in range(HELD_CONNECTIONS + 3)]
    for thread in threads:
        thread.start()
        thread.join()
    assert len(answers) == HELD_CONNECTIONS + 3
    assert all(answer is not None and answer.found.queue_id for answer in answers)
    reads.close()  # closes the held connections; reads go on from the pool
    assert version(reads, token, REPO, "main") is not None


@on_postgresql
def test_connections_the_server_dropped_are_let_go(
    reads: SqlQuickReads, queue: Api, container: Container, token: str
) -> None:
    """The thread's held connection (the org-scoped reads) and the event loop's asynchronous
    one (the token-scoped reads), each killed by the server between two reads.
    """

    def kill(pid: int) -> None:
        with container.engine.begin() as connection:
            connection.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})

    org = container.admin.authenticate(token)
    assert org is not None
    assert reads.queue_version(org, REPO, "main") is not None
    held = reads._local.connection  # the connection the test drops
    kill(held.info.backend_pid)
    assert reads.queue_version(org, REPO, "main") is not None
    assert held.closed
    assert reads._local.connection is not held

    async def scenario() -> None:
        asked = [(hash_token(token), QueueAsk(REPO, "main"))]
        (first,) = await reads.token_queue_versions(asked)
        assert first is not None
        (loop_connection,) = list((reads._async or {}).values())
        kill(loop_connection.info.backend_pid)
        (again,) = await reads.token_queue_versions(asked)
        assert again == first
        assert loop_connection.closed

    asyncio.run(scenario())


def first_entries(
    reads: SqlQuickReads, container: Container, token: str, *numbers: int
) -> tuple[QueueId, QueueModes, list[QueueEntry], list[StateChange]]:
    """The queue of `main` as a read finds it, and PRs `numbers` entering it (positions
    counted from 1 among them), with their history lines.
    """
    org = container.admin.authenticate(token)
    assert org is not None
    found = reads.queued_options(org, REPO, "main", 0)
    assert found is not None
    assert found.queue_id is not None
    assert found.queue is not None
    entries = [
        make_entry(
            number=number,
            queue_id=found.queue_id,
            state=PrState.NOT_READY,
            state_reason=StateReason.SUBMITTED,
            position=position,
        )
        for position, number in enumerate(numbers, start=1)
    ]
    changes = [
        make_change(
            number=number,
            queue_id=found.queue_id,
            to_state=PrState.NOT_READY,
            reason=StateReason.SUBMITTED,
        )
        for number in numbers
    ]
    return found.queue_id, found.queue, entries, changes


def stored(container: Container, queue_id: QueueId) -> dict[int, tuple[int, int]]:
    """Each entry's number: its position and how many history lines it has."""
    with container.unit_of_work(read_only=True) as uow:
        return {
            entry.number: (entry.position, len(uow.history.list_for_entry(entry.id)))
            for entry in uow.entries.list_for_queues([queue_id])
        }


def test_first_entries_take_the_next_positions_and_leave_out_a_pr_entered_meanwhile(
    reads: SqlQuickReads, queue: Api, container: Container, token: str
) -> None:
    queue_id, modes, entries, changes = first_entries(reads, container, token, 4, 2)
    assert asyncio.run(reads.enter_first(queue_id, modes, entries, changes)) == {
        entry.id for entry in entries
    }
    with container.unit_of_work() as uow:
        taken = uow.queues.next_position(queue_id)  # a resubmit's position, between writes
        uow.commit()
    # PR 2 again (another process was first: another id), and PR 7.
    _, _, again, again_changes = first_entries(reads, container, token, 2, 7)
    again = [replace(entry, id=PullRequestId(f"again-{entry.number}")) for entry in again]
    again_changes = [
        replace(change, pull_request_id=entry.id)
        for change, entry in zip(again_changes, again, strict=True)
    ]
    assert asyncio.run(reads.enter_first(queue_id, modes, again, again_changes)) == {again[1].id}
    assert stored(container, queue_id) == {4: (1, 1), 2: (2, 1), 7: (taken + 2, 1)}


def test_first_entries_are_not_written_to_a_queue_no_longer_as_read(
    reads: SqlQuickReads, queue: Api, container: Container, token: str
) -> None:
    queue_id, modes, entries, changes = first_entries(reads, container, token, 1)
    other_mode = replace(modes, mode=QueueMode.PARALLEL)
    switching = replace(modes, pending_mode=QueueMode.PARALLEL)
    for read_as in (other_mode, switching):
        assert asyncio.run(reads.enter_first(queue_id, read_as, entries, changes)) == set()
    gone = QueueId("no-such-queue")
    assert asyncio.run(reads.enter_first(gone, modes, entries, changes)) == set()
    update_queue(queue, state="draining")
    assert asyncio.run(reads.enter_first(queue_id, modes, entries, changes)) == set()
    assert stored(container, queue_id) == {}


@on_postgresql
def test_a_first_entries_write_is_not_sent_again_on_a_dropped_connection(
    reads: SqlQuickReads, queue: Api, container: Container, token: str
) -> None:
    """The write has a connection of its own beside the reads'; one the server dropped fails
    the write (it may have been made), and the next write connects again.
    """
    queue_id, modes, entries, changes = first_entries(reads, container, token, 1, 2, 3)

    async def scenario() -> None:
        await reads.token_queue_versions([(hash_token(token), QueueAsk(REPO, "main"))])
        assert await reads.enter_first(queue_id, modes, entries[:1], changes[:1])
        connections = reads._async or {}
        assert len(connections) == 2
        (writing,) = [one for (_loop, write), one in connections.items() if write]
        with container.engine.begin() as connection:
            connection.execute(
                text("SELECT pg_terminate_backend(:pid)"), {"pid": writing.info.backend_pid}
            )
        with pytest.raises(psycopg.OperationalError):
            await reads.enter_first(queue_id, modes, entries[1:2], changes[1:2])
        assert await reads.enter_first(queue_id, modes, entries[2:], changes[2:]) == {entries[2].id}

    asyncio.run(scenario())
    assert sorted(stored(container, queue_id)) == [1, 3]


@on_postgresql
def test_a_first_entries_value_too_long_for_its_column_is_refused_not_cut(
    reads: SqlQuickReads, queue: Api, container: Container, token: str
) -> None:
    queue_id, modes, entries, changes = first_entries(reads, container, token, 1)
    long_id = PullRequestId("x" * 40)  # the id column holds 36 characters
    with pytest.raises(psycopg.errors.StringDataRightTruncation):
        asyncio.run(
            reads.enter_first(
                queue_id,
                modes,
                [replace(entries[0], id=long_id)],
                [replace(changes[0], pull_request_id=long_id)],
            )
        )
    assert stored(container, queue_id) == {}


@on_postgresql
def test_many_prs_are_read_by_their_key_whatever_the_statistics_say(
    reads: SqlQuickReads, queue: Api, container: Container, token: str
) -> None:
    """A queue that grew a hundredfold since PostgreSQL last analyzed it (a flood of first
    submits): each asked PR is still found through the (queue, number) index, not by reading
    all the queue's entries.
    """
    _queue_id, _modes, entries, _changes = first_entries(reads, container, token, *range(1, 8))
    with container.unit_of_work() as uow:
        uow.entries.add_all(entries)
        uow.commit()
    with container.engine.begin() as connection:
        connection.execute(text("ANALYZE queue_entries"))
    _, _, more, _ = first_entries(reads, container, token, *range(8, 3000))
    with container.unit_of_work() as uow:
        uow.entries.add_all(more)
        uow.commit()
    hashed = hash_token(token)
    parameters = [
        value
        for index in range(4)
        for value in (index, hashed, REPO.host, REPO.owner, REPO.name, "main", 5000 + index)
    ]
    with container.engine.connect() as connection:
        plan = "\n".join(
            row[0]
            for row in connection.exec_driver_sql(
                f"EXPLAIN ANALYZE {reads._token_queued_options[4]}", tuple(parameters)
            )
        )
    assert "uq_queue_entries_queue_id_number" in plan
    assert "Rows Removed" not in plan


def test_the_decision_counter_moves_for_all_but_prs_entering_unread(
    reads: SqlQuickReads, queue: Api, container: Container, token: str
) -> None:
    """PRs entering unread (their entries, `submitted` lines and positions) move the queue's
    version, which the polled answers are kept under, and leave its decision counter; what
    the scheduler decides on moves both.
    """
    queue_id, modes, entries, changes = first_entries(reads, container, token, 1, 2)
    org = container.admin.authenticate(token)
    assert org is not None

    def counters() -> tuple[int, int | None]:
        found = reads.queue_version(org, REPO, "main")
        assert found is not None
        with container.unit_of_work(read_only=True) as uow:
            return found.version, uow.queues.decision_version(queue_id)

    version, decision = counters()
    unread = [replace(entry, head_sha="") for entry in entries]
    assert asyncio.run(reads.enter_first(queue_id, modes, unread, changes))
    with container.unit_of_work() as uow:
        uow.queues.next_position(queue_id)
        uow.commit()
    moved, same = counters()
    assert (moved > version, same) == (True, decision)
    with container.unit_of_work() as uow:
        entry = uow.entries.get(unread[0].id)
        uow.entries.save(replace(entry, state=PrState.PENDING, head_sha="a" * 40))
        uow.commit()
    after_entry = counters()[1]
    assert after_entry is not None
    assert after_entry > (decision or 0)
    update_queue(queue, concurrency=3)
    after_queue = counters()[1]
    assert after_queue is not None
    assert after_queue > after_entry
    with container.unit_of_work(read_only=True) as uow:
        assert uow.queues.decision_version(QueueId("no-such-queue")) is None


@on_postgresql
def test_a_write_moves_the_queues_counters_once_per_statement(
    reads: SqlQuickReads, queue: Api, container: Container, token: str
) -> None:
    """However many rows one statement writes, the queue's row is updated once (migration
    0028): `version` by one, and `decision_version` by one when any of the rows is more than a
    PR entering unread.
    """
    queue_id, modes, entries, changes = first_entries(reads, container, token, 1, 2, 3, 4)

    def counters() -> tuple[int, int]:
        with container.engine.connect() as connection:
            row = connection.execute(
                text("SELECT version, decision_version FROM queues WHERE id = :id"),
                {"id": queue_id},
            ).one()
        return row[0], row[1]

    version, decision = counters()
    unread = [replace(entry, head_sha="") for entry in entries]
    # One read PR among unread ones: the decision's counter moves, once.
    unread[3] = entries[3]
    assert len(asyncio.run(reads.enter_first(queue_id, modes, unread, changes))) == 4
    # The positions taken, the entries inserted, their history lines inserted: three moves.
    assert counters() == (version + 3, decision + 1)
    version, decision = counters()
    with container.engine.begin() as connection:
        connection.execute(text("UPDATE queue_entries SET no_batch = NOT no_batch"))
        connection.execute(text("DELETE FROM state_changes"))
    assert counters() == (version + 2, decision + 2)
