"""Several HTTP processes on one database answer as one: `keepgreen serve --workers N`, and
separate `keepgreen serve` processes side by side. Each process keeps its own snapshots of the
polled answers; a write through any process (or the queue worker) is seen by the next read
through any other. A submit through a process without the worker wakes the worker at once
(its poll here is a minute).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.cli.test_serve_e2e import STOP_TIMEOUT_SECONDS, Served, keepgreen
from tests.support.gitrepo import GitRepo
from tests.support.pgschema import fresh_schema
from tests.support.wire import REPO_JSON

pytestmark = pytest.mark.slow

PG_URL = os.environ.get("KEEPGREEN_TEST_DATABASE_URL")
BACKENDS = ["sqlite", *(["postgresql"] if PG_URL else [])]
PRS = 6
READ_TIMEOUT_SECONDS = 60.0
# The queue worker's poll in these tests: a minute. A PR submitted through an HTTP process
# without the worker is read at once only because the submit wakes the worker through the
# database's wake channel (NOTIFY on PostgreSQL, a datagram on SQLite); at the poll, the six
# reads of a test would take minutes and time out.
SLOW_POLL = {"KEEPGREEN_WORKER_POLL_SECONDS": "60"}
WOKEN_READ_SECONDS = 15.0


@pytest.fixture(params=BACKENDS)
def env(request: pytest.FixtureRequest, fresh_env: dict[str, str]) -> Iterator[dict[str, str]]:
    """A fresh install on SQLite (the data dir) or on a PostgreSQL schema of its own."""
    if request.param == "sqlite":
        yield fresh_env
        return
    assert PG_URL is not None
    with fresh_schema(PG_URL, prefix="kg_procs") as url:
        yield fresh_env | {"KEEPGREEN_DATABASE_URL": url}


@pytest.fixture
def token(env: dict[str, str], workdir: Path, tmp_path: Path) -> str:
    repo = GitRepo(tmp_path / "widgets")
    repo.commit({"README": "widgets\n"}, "Start")
    for number in range(1, PRS + 1):
        repo.open_pr(number, {f"f{number}.txt": f"{number}\n"}, title=f"PR {number}")
    created = keepgreen("token", "create", "--org", "acme", env=env, cwd=workdir)
    keepgreen(
        "repo", "add", "--org", "acme", "--host", "github.com", "--owner", "acme",
        "--name", "widgets", "--git-url", str(repo.path), "--ci-command", "true",
        env=env, cwd=workdir,
    )  # fmt: skip
    return created.stdout.splitlines()[-1].strip()


@pytest.fixture
def start(env: dict[str, str], workdir: Path, tmp_path: Path) -> Iterator[Callable[..., Served]]:
    """Starts `keepgreen serve FLAGS` when called; stops whatever was started at teardown."""
    started: list[Served] = []

    def run(*flags: str, worker: bool = False, slow_poll: bool = True) -> Served:
        log = tmp_path / f"serve-{len(started)}.log"
        environment = env | SLOW_POLL if slow_poll else env
        served = Served(env=environment, cwd=workdir, log=log, worker=worker, flags=flags)
        started.append(served)
        served.wait_until_answering()
        return served

    yield run
    for served in started:
        served.stop()


def post(url: str, token: str, verb: str, **body: object) -> httpx.Response:
    return httpx.post(
        f"{url}/{verb}",
        json={"repo": REPO_JSON, "targetBranch": "main", **body},
        headers={"x-api-token": token},
        timeout=30,
    )


def states(url: str, token: str) -> dict[int, str]:
    answer = post(url, token, "getQueue")
    assert answer.status_code == 200, answer.text
    return {pr["prNumber"]: pr["state"] for pr in answer.json()["enqueuedPullRequests"]}


def keep_in_queue(url: str, token: str) -> None:
    """Require a check nobody reports: the PRs the worker admits stay in the queue (testing
    or pending) instead of merging once the built-in CI passes.
    """
    assert post(url, token, "updateQueue", requiredStatuses=["ci"]).status_code == 200


def wait_until_read(url: str, token: str, number: int, *, submitted: float) -> str:
    """Poll getSubmittedPullRequest until the worker read PR `number` (the submit does not
    wait on git: until then it is `not_ready`, unread), submitted at `submitted` (monotonic):
    its state then, which must come well within the worker's poll (`SLOW_POLL`).
    """
    deadline = time.monotonic() + READ_TIMEOUT_SECONDS
    while True:
        answer = post(url, token, "getSubmittedPullRequest", pr={"number": number})
        assert answer.status_code == 200, answer.text
        pr = answer.json()
        if pr["prSha"] != "" or time.monotonic() > deadline:
            assert pr["prSha"] != "", f"PR {number} was not read in {READ_TIMEOUT_SECONDS} s"
            took = time.monotonic() - submitted
            assert took < WOKEN_READ_SECONDS, f"PR {number} read after {took:.1f} s: not woken"
            state: str = pr["state"]
            return state
        time.sleep(0.1)


def test_two_processes_on_one_database_see_each_others_writes(
    start: Callable[..., Served],
    token: str,
    env: dict[str, str],
    workdir: Path,
    tmp_path: Path,
) -> None:
    """Two API processes and a `keepgreen worker` that reads and admits the PRs submitted;
    the worker is stopped before the last part, so that nothing moves while the two
    processes' answers are compared.
    """
    one = start()
    two = start()
    assert post(one.url, token, "createQueue").status_code == 200
    keep_in_queue(one.url, token)
    with (tmp_path / "worker.log").open("w") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "keepgreen", "worker"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env | SLOW_POLL,
            cwd=workdir,
        )
    try:
        for number in range(1, PRS + 1):
            # Both processes have a snapshot of the queue before each write.
            before = (states(one.url, token), states(two.url, token))
            writer, reader = (one, two) if number % 2 else (two, one)
            at = time.monotonic()
            submitted = post(writer.url, token, "submitPullRequest", pr={"number": number})
            assert submitted.status_code == 200, submitted.text
            # The entry written by the submit, through the other process at once.
            answer = post(reader.url, token, "getSubmittedPullRequest", pr={"number": number})
            assert answer.status_code == 200, answer.text
            assert answer.json()["isCurrentlySubmittedToQueue"] is True
            # The worker's read and admission, written to the database, seen by both.
            assert wait_until_read(reader.url, token, number, submitted=at) in (
                "pending",
                "testing",
            )
            assert number not in before[0]
            assert number not in before[1]
            assert number in states(reader.url, token)
            assert number in states(writer.url, token)
    finally:
        worker.terminate()
        assert worker.wait(timeout=STOP_TIMEOUT_SECONDS) == 0, (tmp_path / "worker.log").read_text()
    cancelled = post(one.url, token, "cancelPullRequest", pr={"number": 1})
    assert cancelled.status_code == 200
    assert 1 not in states(two.url, token)
    pr = post(two.url, token, "getSubmittedPullRequest", pr={"number": 1}).json()
    assert pr["state"] == "cancelled"

    # The same bytes have the same ETag in every process: a poller may switch between them.
    first = post(one.url, token, "getQueue")
    second = post(two.url, token, "getQueue")
    assert first.content == second.content
    assert first.headers["etag"] == second.headers["etag"]
    again = httpx.post(
        f"{two.url}/getQueue",
        json={"repo": REPO_JSON, "targetBranch": "main"},
        headers={"x-api-token": token, "if-none-match": first.headers["etag"]},
    )
    assert again.status_code == 304


def test_serve_with_several_http_processes(start: Callable[..., Served], token: str) -> None:
    served = start("--workers", "2", worker=True)
    assert post(served.url, token, "createQueue").status_code == 200
    keep_in_queue(served.url, token)
    # A connection per request, so that both processes answer; each write (the submit, the
    # worker's admission of the PR it read, the cancel) is seen by the next read, whichever
    # process takes it.
    for number in range(1, PRS + 1):
        at = time.monotonic()
        submitted = post(served.url, token, "submitPullRequest", pr={"number": number})
        assert submitted.status_code == 200
        assert wait_until_read(served.url, token, number, submitted=at) in ("pending", "testing")
        for _ in range(4):
            assert number in states(served.url, token)
        cancelled = post(served.url, token, "cancelPullRequest", pr={"number": number})
        assert cancelled.status_code == 200
        for _ in range(4):
            assert number not in states(served.url, token)
    children = _children(served.process.pid)
    assert len(children) >= 2, children
    assert served.stop() == 0, served.output
    # Every HTTP process (and multiprocessing's helper) exits with the server.
    deadline = time.monotonic() + 10
    while not all(_is_gone(child) for child in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [child for child in children if not _is_gone(child)] == []


def test_the_queue_worker_runs_beside_several_http_processes(
    start: Callable[..., Served], token: str
) -> None:
    # The default poll: a built test run's CI starts at the worker's next pass.
    served = start("--workers", "2", worker=True, slow_poll=False)
    assert post(served.url, token, "createQueue").status_code == 200
    assert post(served.url, token, "submitPullRequest", pr={"number": 1}).status_code == 200
    deadline = time.monotonic() + 60
    state = ""
    while time.monotonic() < deadline and state != "merged":
        answer = post(served.url, token, "getSubmittedPullRequest", pr={"number": 1})
        state = answer.json()["state"]
        time.sleep(0.2)
    assert state == "merged", served.output
    assert served.stop() == 0, served.output


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(child) for child in path.read_text().split()]


def _is_gone(pid: int) -> bool:
    """Exited: no such process, or one only waiting to be reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] == "Z"
    except FileNotFoundError:
        return True
