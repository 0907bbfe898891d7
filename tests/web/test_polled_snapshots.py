"""getQueue and getSubmittedPullRequest are served from snapshots kept per queue version: a
write is seen by the very next read, whoever made it (the API, the worker, a raw SQL write);
the ETag names the bytes, and If-None-Match gets 304 only while they are unchanged.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import inspect, text

from keepgreen.adapters.db.engine import alembic_config
from keepgreen.app.pull_requests import QueueTarget
from keepgreen.bootstrap import Container
from keepgreen.web.app import create_app
from keepgreen.web.snapshots import Snapshots, etag_of, matches
from tests.support.gitrepo import GitRepo
from tests.support.wire import REPO, Api, assert_error, worker_pass

PR = {"number": 1}
POLLED = (
    ("getQueue", {"targetBranch": "main"}),
    ("getSubmittedPullRequest", {"targetBranch": "main", "pr": PR}),
)


def fresh_response(container: Container, token: str, verb: str, body: dict[str, Any]) -> Any:
    """The response of an app with no snapshot at all, on the same database."""
    with TestClient(create_app(container=container)) as other:
        return other.post(
            f"/v1/{verb}",
            json={"repo": {"host": REPO.host, "owner": REPO.owner, "name": REPO.name}, **body},
            headers={"x-api-token": token},
        )


def fresh_answer(container: Container, token: str, verb: str, body: dict[str, Any]) -> Any:
    """The answer of an app with no snapshot at all, on the same database (a 200)."""
    answer = fresh_response(container, token, verb, body)
    assert answer.status_code == 200, answer.text
    return answer.json()


def queue_version(container: Container) -> int:
    with container.engine.connect() as connection:
        version: int = connection.execute(text("SELECT version FROM queues")).scalar_one()
    return version


@pytest.fixture
def submitted(queue: Api, registered_repo: GitRepo) -> Api:
    """PR 1 submitted, and unread (no worker pass yet); PR 2 open in git, not submitted."""
    registered_repo.open_pr(1, {"a.txt": "a\n"}, title="Add a")
    registered_repo.open_pr(2, {"b.txt": "b\n"}, title="Add b")
    assert queue.post("submitPullRequest", targetBranch="main", pr=PR).status_code == 200
    return queue


@pytest.mark.parametrize(("verb", "body"), POLLED, ids=[verb for verb, _ in POLLED])
def test_if_none_match_gets_304_while_unchanged(
    submitted: Api, verb: str, body: dict[str, Any]
) -> None:
    required = submitted.post("updateQueue", targetBranch="main", requiredStatuses=["ci"])
    assert required.status_code == 200, required.text
    first = submitted.post(verb, body)
    assert first.status_code == 200
    etag = first.headers["etag"]
    assert etag == etag_of(first.content)
    headers = {"x-api-token": submitted.token}
    payload = {"repo": submitted.repo, **body}
    for sent in (etag, f"W/{etag}", f'"other", {etag}', "*"):
        again = submitted.client.post(
            f"/v1/{verb}", json=payload, headers=headers | {"if-none-match": sent}
        )
        assert again.status_code == 304, sent
        assert again.content == b""
        assert again.headers["etag"] == etag
    stale = submitted.client.post(
        f"/v1/{verb}", json=payload, headers=headers | {"if-none-match": '"other"'}
    )
    assert stale.status_code == 200
    assert stale.content == first.content

    # Changes: the old ETag no longer matches, and the new answer has a new one. The worker's
    # pass reads PR 1 and starts testing it (the queue requires `ci`, so the run waits), which
    # lists it in getQueue; then a resubmit changes its priority.
    def read_by_the_worker() -> None:
        worker_pass(submitted)

    def resubmit_high() -> None:
        answer = submitted.post("submitPullRequest", targetBranch="main", pr=PR, priority="high")
        assert answer.status_code == 200, answer.text

    previous = first
    for change in (read_by_the_worker, resubmit_high):
        change()
        changed = submitted.client.post(
            f"/v1/{verb}",
            json=payload,
            headers=headers | {"if-none-match": previous.headers["etag"]},
        )
        assert changed.status_code == 200
        assert changed.headers["etag"] != previous.headers["etag"]
        assert changed.json() != previous.json()
        assert changed.headers["etag"] == etag_of(changed.content)
        previous = changed
    pr = submitted.post("getSubmittedPullRequest", targetBranch="main", pr=PR).json()
    assert (pr["state"], pr["priorityName"], pr["prTitle"]) == ("testing", "high", "Add a")


def test_an_etag_from_one_call_is_not_a_304_of_another(submitted: Api) -> None:
    queue_etag = submitted.post("getQueue", targetBranch="main").headers["etag"]
    answer = submitted.client.post(
        "/v1/getSubmittedPullRequest",
        json={"repo": submitted.repo, "targetBranch": "main", "pr": PR},
        headers={"x-api-token": submitted.token, "if-none-match": queue_etag},
    )
    assert answer.status_code == 200


def test_each_api_write_is_seen_by_the_next_read(
    submitted: Api, container: Container, token: str
) -> None:
    """Each write, and each worker pass (which reads the PRs submitted since, admits them and
    starts a run), is seen by the next read of every polled answer, with a new ETag.
    """
    pr_2: dict[str, Any] = {"targetBranch": "main", "pr": {"number": 2}}
    reads: dict[str, tuple[str, dict[str, Any]]] = {  # PR 2's answer is a 404 until it is submitted
        "getQueue": POLLED[0],
        "pr 1": POLLED[1],
        "pr 2": ("getSubmittedPullRequest", pr_2),
    }
    worker: tuple[str, dict[str, Any]] = ("worker pass", {})
    writes: list[tuple[str, dict[str, Any]]] = [
        ("updateQueue", {"targetBranch": "main", "requiredStatuses": ["ci"]}),
        ("submitPullRequest", {"targetBranch": "main", "pr": {"number": 2}}),
        worker,
        ("submitPullRequest", {"targetBranch": "main", "pr": {"number": 2}, "priority": 1}),
        ("submitPullRequest", {"targetBranch": "main", "pr": PR, "noBatch": True}),
        ("updateQueue", {"targetBranch": "main", "concurrency": 3}),
        ("updateQueue", {"targetBranch": "main", "state": "PAUSED"}),
        ("setCommitStatus", {"sha": "a" * 40, "context": "ci/x", "state": "pending"}),
        ("cancelPullRequest", {"targetBranch": "main", "pr": {"number": 2}}),
        ("updateQueue", {"targetBranch": "main", "state": "RUNNING"}),
        ("cancelPullRequest", {"targetBranch": "main", "pr": PR}),
    ]
    for verb, body in writes:
        before = {name: submitted.post(call, args) for name, (call, args) in reads.items()}
        if (verb, body) == worker:
            worker_pass(submitted)
        else:
            written = submitted.post(verb, body)
            assert written.status_code == 200, (verb, written.text)
        after = {name: submitted.post(call, args) for name, (call, args) in reads.items()}
        for name, (call, args) in reads.items():
            served, fresh = after[name], fresh_response(container, token, call, args)
            assert (served.status_code, served.json()) == (fresh.status_code, fresh.json()), (
                verb,
                name,
            )
        changed = [
            name
            for name in reads
            if (after[name].status_code, after[name].json())
            != (before[name].status_code, before[name].json())
        ]
        for name in changed:  # a changed answer has a new ETag
            assert after[name].headers.get("etag") != before[name].headers.get("etag"), (verb, name)
        if verb != "setCommitStatus":  # a status of no tested commit changes no answer
            assert changed, verb
        if body == pr_2 and verb == "submitPullRequest":  # taken at once, unread
            answer = after["pr 2"]
            assert before["pr 2"].status_code == 404
            assert answer.status_code == 200
            assert (answer.json()["state"], answer.json()["prSha"]) == ("not_ready", "")
        if (verb, body) == worker:  # read and admitted: PR 1 testing, PR 2 waiting behind it
            states = [
                (pr["prNumber"], pr["state"])
                for pr in after["getQueue"].json()["enqueuedPullRequests"]
            ]
            assert states == [(1, "testing"), (2, "pending")]


def test_a_write_outside_the_api_is_seen_by_the_next_read(
    submitted: Api, container: Container, token: str
) -> None:
    """The worker and other processes write straight to the database; the snapshots of this
    process must not hide it.
    """
    before = submitted.post("getSubmittedPullRequest", targetBranch="main", pr=PR).json()
    container.pull_requests.cancel(QueueTarget(_org_of(container, token), REPO, "main"), 1)
    after = submitted.post("getSubmittedPullRequest", targetBranch="main", pr=PR).json()
    assert after["state"] != before["state"]
    assert after == fresh_answer(
        container, token, "getSubmittedPullRequest", {"targetBranch": "main", "pr": PR}
    )


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE queues SET concurrency = concurrency + 1",
        "UPDATE queue_entries SET no_batch = no_batch",
        "UPDATE repositories SET name = name",
        "DELETE FROM state_changes",
    ],
)
def test_the_database_moves_the_version_on_each_write(
    submitted: Api, container: Container, statement: str
) -> None:
    before = queue_version(container)
    with container.engine.begin() as connection:
        connection.execute(text(statement))
    assert queue_version(container) > before


def test_every_table_an_answer_reads_moves_the_version(container: Container) -> None:
    """The triggers of migration 0019 are all there (a migration that rebuilds a table on
    SQLite would drop its triggers silently).
    """
    tables = {
        "queues", "queue_entries", "test_runs", "test_run_entries", "queue_effects",
        "queue_incidents", "state_changes", "impacted_targets", "commit_statuses",
        "repositories",
    }  # fmt: skip
    with container.engine.connect() as connection:
        if container.engine.dialect.name == "sqlite":
            rows = connection.execute(
                text("SELECT tbl_name FROM sqlite_master WHERE type = 'trigger'")
            )
        else:
            rows = connection.execute(
                text(
                    "SELECT c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
                    "WHERE NOT t.tgisinternal AND t.tgname LIKE 'kg_version_%'"
                )
            )
        assert {row[0] for row in rows} >= tables


def test_a_resubmit_that_changes_nothing_writes_nothing(
    submitted: Api, container: Container
) -> None:
    before = queue_version(container)
    for _ in range(3):
        assert submitted.post("submitPullRequest", targetBranch="main", pr=PR).status_code == 200
    assert queue_version(container) == before
    assert (
        submitted.post("submitPullRequest", targetBranch="main", pr=PR, priority="high").status_code
        == 200
    )
    assert queue_version(container) > before
    # PR 1 is unread (no worker pass), so getQueue does not list it: its own answer shows it.
    pr = submitted.post("getSubmittedPullRequest", targetBranch="main", pr=PR).json()
    assert (pr["state"], pr["priorityName"]) == ("not_ready", "high")


def test_another_orgs_token_gets_no_snapshot(submitted: Api, other_token: str) -> None:
    assert submitted.post("getQueue", targetBranch="main").status_code == 200
    answer = submitted.client.post(
        "/v1/getQueue",
        json={"repo": submitted.repo, "targetBranch": "main"},
        headers={"x-api-token": other_token},
    )
    assert answer.status_code == 404
    assert "etag" not in answer.headers


# -- the store ---------------------------------------------------------------------------------


class Ticks:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_snapshot_answers_only_its_own_version_and_only_while_young() -> None:
    ticks = Ticks()
    store = Snapshots(max_age_seconds=1.0, clock=ticks)
    made = store.put("q", 5, b"{}")
    assert store.get("q", 5) == made
    assert store.get("q", 6) is None
    assert store.get("other", 5) is None
    ticks.now += 1.0
    assert store.get("q", 5) is None


def test_a_slower_build_of_an_older_version_does_not_replace_a_newer_one() -> None:
    store = Snapshots()
    store.put("q", 7, b"new")
    older = store.put("q", 6, b"old")
    assert older.body == b"old"  # the request that built it is answered with it
    kept = store.get("q", 7)
    assert kept is not None
    assert kept.body == b"new"


def test_the_store_keeps_at_most_its_size() -> None:
    store = Snapshots(size=2)
    for key in ("a", "b", "c"):
        store.put(key, 1, key.encode())
    assert store.get("a", 1) is None
    assert store.get("c", 1) is not None


@pytest.mark.parametrize(
    ("header", "expected"),
    [('"x"', True), ('W/"x"', True), ('"y", "x"', True), ("*", True), ('"y"', False), ("", False)],
)
def test_if_none_match_names_the_etag(header: str, expected: bool) -> None:
    assert matches(header, '"x"') is expected


def _org_of(container: Container, token: str) -> Any:
    org = container.admin.authenticate(token)
    assert org is not None
    return org


# -- one build at a time -------------------------------------------------------------------------


class Builds:
    """A build the test releases by hand, counting how often it ran."""

    def __init__(self, version: int) -> None:
        self.version = version
        self.count = 0
        self.release = threading.Event()

    def __call__(self) -> tuple[int, bytes]:
        self.count += 1
        assert self.release.wait(10)
        return self.version, f"v{self.version}".encode()


def test_requests_that_arrive_together_wait_for_one_build() -> None:
    async def scenario() -> None:
        store = Snapshots()
        build = Builds(3)
        waiting = [asyncio.ensure_future(store.answer("q", 3, build)) for _ in range(8)]
        await asyncio.sleep(0.05)
        build.release.set()
        answers = await asyncio.gather(*waiting)
        assert build.count == 1
        assert {answer.body for answer in answers} == {b"v3"}

    asyncio.run(scenario())


def test_a_build_that_read_an_older_version_is_built_again() -> None:
    async def scenario() -> None:
        store = Snapshots()
        versions = iter((4, 5))
        release = threading.Event()

        def build() -> tuple[int, bytes]:
            version = next(versions)  # a write moves the queue to 5 during the first build
            assert release.wait(10)
            return version, f"v{version}".encode()

        first = asyncio.ensure_future(store.answer("q", 4, build))
        await asyncio.sleep(0.05)
        second = asyncio.ensure_future(store.answer("q", 5, build))  # read 5: waits on it
        await asyncio.sleep(0.05)
        release.set()
        assert (await first).body == b"v4"
        assert (await second).body == b"v5"  # not answered with the build of 4
        kept = store.get("q", 5)
        assert kept is not None
        assert kept.body == b"v5"

    asyncio.run(scenario())


def test_an_old_snapshot_is_answered_while_one_request_rebuilds_it() -> None:
    async def scenario() -> None:
        ticks = Ticks()
        store = Snapshots(max_age_seconds=1.0, clock=ticks)
        store.put("q", 2, b"old")
        ticks.now += 1.5
        build = Builds(2)
        answers = [await store.answer("q", 2, build) for _ in range(5)]
        assert [answer.body for answer in answers] == [b"old"] * 5
        build.release.set()
        await asyncio.sleep(0.1)
        assert build.count == 1
        assert (await store.answer("q", 2, build)).body == b"v2"
        # Much older than the age: waits for its rebuild instead.
        ticks.now += 10
        late = Builds(2)
        late.release.set()
        store.put("q", 2, b"older")
        ticks.now += 10
        assert (await store.answer("q", 2, late)).body == b"v2"

    asyncio.run(scenario())


def test_a_failed_build_fails_every_request_waiting_on_it_and_is_not_kept() -> None:
    async def scenario() -> None:
        store = Snapshots()

        def broken() -> tuple[int, bytes]:
            time.sleep(0.05)
            raise LookupError("no such queue")

        waiting = [asyncio.ensure_future(store.answer("q", 1, broken)) for _ in range(3)]
        results = await asyncio.gather(*waiting, return_exceptions=True)
        assert all(isinstance(result, LookupError) for result in results)
        assert store.get("q", 1) is None
        assert store._building == {}

    asyncio.run(scenario())


def test_a_resubmit_by_another_org_or_to_no_queue_is_still_404(
    submitted: Api, other_token: str
) -> None:
    stranger = submitted.client.post(
        "/v1/submitPullRequest",
        json={"repo": submitted.repo, "targetBranch": "main", "pr": PR},
        headers={"x-api-token": other_token},
    )
    assert_error(stranger, 404, "repository_not_found")
    no_queue = submitted.post("submitPullRequest", targetBranch="release", pr=PR)
    assert_error(no_queue, 404, "queue_not_found")


def test_a_resubmit_of_a_pr_that_left_starts_it_again(submitted: Api) -> None:
    assert submitted.post("cancelPullRequest", targetBranch="main", pr=PR).status_code == 200
    again = submitted.post("submitPullRequest", targetBranch="main", pr=PR)
    assert again.status_code == 200
    state = submitted.post("getSubmittedPullRequest", targetBranch="main", pr=PR).json()["state"]
    assert state != "cancelled"


def test_migration_0019_goes_down_and_up_again(submitted: Api, container: Container) -> None:
    config = alembic_config(container.engine)
    try:
        command.downgrade(config, "0018")
        with container.engine.connect() as connection:
            columns = {column["name"] for column in inspect(connection).get_columns("queues")}
        assert "version" not in columns
        with container.engine.connect() as connection:
            entries = connection.execute(text("SELECT count(*) FROM queue_entries")).scalar()
        assert entries == 1  # nothing lost with the column
        # Without the column and its triggers, writes go on as before 0019.
        with container.engine.begin() as connection:
            connection.execute(text("UPDATE queue_entries SET no_batch = no_batch"))
    finally:
        command.upgrade(config, "head")
    before = queue_version(container)
    with container.engine.begin() as connection:
        connection.execute(text("UPDATE queue_entries SET no_batch = no_batch"))
    assert queue_version(container) > before


def test_a_snapshot_built_in_the_future_is_not_kept_young() -> None:
    ticks = Ticks()
    store = Snapshots(max_age_seconds=1.0, clock=ticks)
    store.put("q", 1, b"{}")
    ticks.now -= 3600  # the clock went back an hour
    assert store.get("q", 1) is None
