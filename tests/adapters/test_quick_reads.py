"""The one-statement reads of every polled request, on held connections and pooled ones: they
see every committed write at once, check the token in the same statement, and survive a
connection the database dropped.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from sqlalchemy import text

from keepgreen.adapters.db.quick_reads import HELD_CONNECTIONS, MAX_ASKED, SqlQuickReads
from keepgreen.app.admin import hash_token
from keepgreen.bootstrap import Container
from keepgreen.core.model import QueueAsk, QueueVersion, RepoRef, TokenRead
from tests.conftest import PG_URL
from tests.support.gitrepo import GitRepo
from tests.support.wire import REPO, Api


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


@pytest.mark.skipif(PG_URL is None, reason="needs KEEPGREEN_TEST_DATABASE_URL (PostgreSQL)")
@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
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
