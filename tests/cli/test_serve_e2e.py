"""End to end through real processes: create a token, register a repo, serve, use the API and CLI.

Runs `python -m keepgreen` as a user would, on the embedded default (SQLite in the data dir).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from keepgreen.app.pull_requests import QueueTarget
from keepgreen.bootstrap import bootstrap
from keepgreen.core.enums import PrState
from keepgreen.settings import Settings
from tests.cli.conftest import REPO_ARG, free_port
from tests.support.gitrepo import GitRepo
from tests.support.trunk_uploader import Uploader, junit_bundle, trunk_test_id
from tests.support.wire import REPO, queue_body

pytestmark = pytest.mark.slow

COMMAND_TIMEOUT_SECONDS = 60
START_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 10.0


@pytest.fixture
def env(fresh_env: dict[str, str]) -> dict[str, str]:
    """The environment of a fresh install (see `fresh_env`)."""
    return fresh_env


def keepgreen(
    *args: str, env: dict[str, str], cwd: Path, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """`python -m keepgreen ARGS` to completion."""
    result = subprocess.run(
        [sys.executable, "-m", "keepgreen", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=COMMAND_TIMEOUT_SECONDS,
        check=False,
    )
    if check:
        assert result.returncode == 0, (
            f"keepgreen {' '.join(args)} exited {result.returncode}\n"
            f"stdout: {result.stdout}\nstderr: {result.stderr}"
        )
    return result


class Served:
    """A `keepgreen serve` process on a free port, logging to a file."""

    def __init__(
        self,
        *,
        env: dict[str, str],
        cwd: Path,
        log: Path,
        worker: bool = False,
        flags: tuple[str, ...] = (),
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.log = log
        # Without the worker the API alone answers (a PR submitted waits `not_ready`, not yet
        # read), so a test can look at a state the worker would move on from.
        flags = flags if worker else ("--no-worker", *flags)
        with log.open("w") as log_file:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "keepgreen", "serve", "--port", str(self.port), *flags],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
            )

    def wait_until_answering(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"keepgreen serve exited {self.process.returncode}:\n{self.output}")
            try:
                httpx.get(f"{self.url}/openapi.json", timeout=1.0)
            except httpx.TransportError:
                time.sleep(0.1)
            else:
                return
        pytest.fail(f"keepgreen serve did not answer in {START_TIMEOUT_SECONDS} s:\n{self.output}")

    def stop(self) -> int:
        """SIGTERM, then SIGKILL if it lingers; the exit code."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait()

    @property
    def output(self) -> str:
        return self.log.read_text()


@pytest.fixture
def serve(env: dict[str, str], workdir: Path, tmp_path: Path) -> Iterator[Callable[..., Served]]:
    """Starts `keepgreen serve` when called; whatever was started is stopped at teardown."""
    started: list[Served] = []

    def start(*, worker: bool = False) -> Served:
        served = Served(
            env=env, cwd=workdir, log=tmp_path / f"serve-{len(started)}.log", worker=worker
        )
        started.append(served)
        served.wait_until_answering()
        return served

    yield start
    for served in started:
        served.stop()


def test_token_repo_serve_submit_and_status(
    env: dict[str, str], workdir: Path, tmp_path: Path, serve: Callable[..., Served]
) -> None:
    """A token, a repository, `keepgreen serve` with its worker, a submit over HTTP and one
    with the CLI: once the worker read each PR (the submit does not wait on git), the API and
    `keepgreen status` show its sha, title and author. The queue requires a `ci` check that
    never reports here, so PR 1 stays testing and PR 2 (high) pending behind it.
    """
    created = keepgreen("token", "create", "--org", "acme", env=env, cwd=workdir)
    token = created.stdout.splitlines()[-1]
    assert token == token.strip()
    assert len(token) >= 20
    assert " " not in token
    assert token not in created.stderr

    git_repo = GitRepo(tmp_path / "widgets")
    sha_1 = git_repo.open_pr(1, {"a.txt": "a\n"}, title="Add a", author="Grace")
    sha_2 = git_repo.open_pr(2, {"b.txt": "b\n"}, title="Add b", author="Ada")
    repo_args = ("--host", "github.com", "--owner", "acme", "--name", "widgets")
    added = keepgreen(
        "repo", "add", "--org", "acme", *repo_args, "--git-url", str(git_repo.path),
        env=env, cwd=workdir,
    )  # fmt: skip
    assert "github.com/acme/widgets" in added.stdout

    served = serve(worker=True)
    url = served.url
    headers = {"x-api-token": token}

    def post(verb: str, **fields: object) -> httpx.Response:
        return httpx.post(f"{url}/{verb}", json=queue_body(**fields), headers=headers, timeout=30)

    assert post("getQueue").status_code == 404
    created_queue = post("createQueue")
    assert (created_queue.status_code, created_queue.json()) == (200, {})
    assert post("updateQueue", requiredStatuses=["ci"]).status_code == 200
    submitted = post("submitPullRequest", pr={"number": 1})
    assert (submitted.status_code, submitted.json()) == (200, {})
    assert wait_for_states(post, {1: "testing"}) == {1: "testing"}, served.output

    queue = post("getQueue").json()
    assert [
        (pr["prNumber"], pr["state"], pr["prSha"], pr["prTitle"], pr["prAuthor"])
        for pr in queue["enqueuedPullRequests"]
    ] == [(1, "testing", sha_1, "Add a", "Grace")]
    pr_1 = post("getSubmittedPullRequest", pr={"number": 1}).json()
    assert (pr_1["state"], pr_1["prSha"], pr_1["isCurrentlySubmittedToQueue"]) == (
        "testing",
        sha_1,
        True,
    )

    # The CLI client against the served API, as separate processes.
    client_env = {**env, "KEEPGREEN_URL": url, "KEEPGREEN_TOKEN": token}
    cli_submit = keepgreen("submit", "2", "--repo", REPO_ARG, "--priority", "high",
                           env=client_env, cwd=workdir)  # fmt: skip
    assert cli_submit.stdout == "Submitted #2 to the main queue of github.com/acme/widgets.\n"
    expected = {1: "testing", 2: "pending"}
    assert wait_for_states(post, expected) == expected, served.output
    status = json.loads(
        keepgreen("status", "2", "--repo", REPO_ARG, "--json", env=client_env, cwd=workdir).stdout
    )
    assert status == post("getSubmittedPullRequest", pr={"number": 2}).json()
    assert (status["state"], status["priorityName"], status["prAuthor"]) == (
        "pending",
        "high",
        "Ada",
    )
    assert [pr["prNumber"] for pr in post("getQueue").json()["enqueuedPullRequests"]] == [1, 2]

    unknown = keepgreen("status", "9", "--repo", REPO_ARG, env=client_env, cwd=workdir, check=False)
    message = post("getSubmittedPullRequest", pr={"number": 9}).json()["error"]["message"]
    assert (unknown.returncode, unknown.stdout, unknown.stderr) == (1, "", f"error: {message}\n")

    # Stopped, the server leaves everything in the SQLite file under the data dir.
    # uvicorn shuts down gracefully on SIGTERM; keepgreen then exits 0 through its cleanup.
    assert served.stop() == 0, served.output
    assert "Application shutdown complete" in served.output
    database = tmp_path / "data" / "keepgreen.db"
    assert database.is_file()
    assert f"database=sqlite:///{database}" in served.output
    assert not (workdir / "keepgreen-data").exists()  # KEEPGREEN_DATA_DIR, not the default
    container = bootstrap(Settings(data_dir=tmp_path / "data", database_url=None))
    try:
        org_id = container.admin.authenticate(token)
        assert org_id is not None
        entry = container.pull_requests.get(QueueTarget(org_id, REPO, "main"), 2)
    finally:
        container.close()
    assert (entry.state, entry.priority.name, entry.head_sha) == (PrState.PENDING, "high", sha_2)


def test_trunks_uploader_against_keepgreen_serve_leaves_no_upload_url_in_its_log(
    env: dict[str, str], workdir: Path, tmp_path: Path, serve: Callable[[], Served]
) -> None:
    """The uploader's calls to a served keepgreen: createBundleUpload, the PUT of its bundle,
    getQuarantineConfig. The upload URL's signature authorises the PUT: it is never logged.
    """
    token = keepgreen("token", "create", "--org", "acme", env=env, cwd=workdir).stdout.split()[-1]
    git_repo = GitRepo(tmp_path / "widgets")
    repo_args = ("--host", "github.com", "--owner", "acme", "--name", "widgets")
    keepgreen(
        "repo", "add", "--org", "acme", *repo_args, "--git-url", str(git_repo.path),
        env=env, cwd=workdir,
    )  # fmt: skip
    served = serve()
    uploader = Uploader(served.url.removesuffix("/v1"), token)
    url = uploader.upload_url()
    signature = url.rpartition(".")[2]
    report = (
        b'<testsuite name="widgets"><testcase name="turns" classname="spec" file="w.rb">'
        b'<failure message="no">trace</failure></testcase></testsuite>'
    )
    put = uploader.put_bundle(url, junit_bundle([("reports/w.xml", report)]).bundle())
    assert put.status_code == 200, put.text
    (failure,) = put.json()["failures"]
    assert failure["test_id"] == trunk_test_id(
        name="turns", parent="widgets", classname="spec", file="w.rb"
    )
    assert uploader.put_bundle(url + "x", b"").status_code == 403
    quarantine = uploader.get_quarantine_config([failure["test_id"]])
    assert quarantine.json() == {"isDisabled": True, "testIds": []}
    assert served.stop() == 0
    log = served.output
    assert "bundle upload stored" in log
    assert "/v1/flaky-tests/bundles/{token}" in log  # the access log names the route
    assert signature not in log


def wait_for_states(
    post: Callable[..., httpx.Response], expected: dict[int, str], *, seconds: float = 60.0
) -> dict[int, str]:
    """Poll getSubmittedPullRequest until every PR is in its expected state (or time runs out)."""
    deadline = time.monotonic() + seconds
    states: dict[int, str] = {}
    while time.monotonic() < deadline:
        states = {
            number: post("getSubmittedPullRequest", pr={"number": number}).json()["state"]
            for number in expected
        }
        if states == expected:
            break
        time.sleep(0.2)
    return states


@pytest.mark.parametrize("separate_worker", [False, True], ids=["serve", "serve_and_worker"])
def test_the_built_in_runner_merges_a_passing_pr_and_fails_a_failing_one(
    env: dict[str, str],
    workdir: Path,
    tmp_path: Path,
    serve: Callable[..., Served],
    separate_worker: bool,
) -> None:
    """The README walkthrough: a local repository, a CI command, serve, submit, merged."""
    token = keepgreen("token", "create", "--org", "acme", env=env, cwd=workdir).stdout.split()[-1]
    git_repo = GitRepo(tmp_path / "widgets")
    git_repo.commit({"check.sh": "test ! -e broken.txt\n"}, "add the check")
    git_repo.open_pr(1, {"a.txt": "fine\n"}, title="Add a")
    git_repo.open_pr(2, {"broken.txt": "oops\n"}, title="Add b")
    repo_args = ("--host", "github.com", "--owner", "acme", "--name", "widgets")
    keepgreen(
        "repo", "add", "--org", "acme", *repo_args, "--git-url", str(git_repo.path),
        "--ci-command", "sh check.sh", env=env, cwd=workdir,
    )  # fmt: skip
    served = serve(worker=not separate_worker)
    worker = None
    worker_log = tmp_path / "worker.log"
    if separate_worker:
        with worker_log.open("w") as log:
            worker = subprocess.Popen(
                [sys.executable, "-m", "keepgreen", "worker"],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**env, "KEEPGREEN_LOG_FORMAT": "json"},
                cwd=workdir,
            )
    try:
        headers = {"x-api-token": token}

        def post(verb: str, **fields: object) -> httpx.Response:
            return httpx.post(
                f"{served.url}/{verb}", json=queue_body(**fields), headers=headers, timeout=30
            )

        assert post("createQueue").status_code == 200
        assert post("submitPullRequest", pr={"number": 1}).status_code == 200
        assert post("submitPullRequest", pr={"number": 2}).status_code == 200
        states = wait_for_states(post, {1: "merged", 2: "failed"})
        assert states == {1: "merged", 2: "failed"}, served.output
    finally:
        if worker is not None:
            worker.terminate()
            assert worker.wait(timeout=STOP_TIMEOUT_SECONDS) == 0
    log_lines = git_repo.git("log", "--format=%s", "main").splitlines()
    assert log_lines == ["Add a (#1)", "add the check", "initial commit"]
    # The worker's log tells the story (JSON lines from `keepgreen worker`, the console
    # format from `keepgreen serve`), and a stopped worker says so.
    if separate_worker:
        events = [json.loads(line) for line in worker_log.read_text().splitlines()]
        (merged,) = [line for line in events if line["event"] == "pr merged"]
        assert (merged["pr"], merged["sha"]) == (1, git_repo.tip("main"))
        (failed,) = [line for line in events if line["event"] == "pr failed"]
        assert (failed["pr"], failed["reason"]) == (2, "tests_failed")
        assert events[-1]["event"] == "worker stopped"
    else:
        assert served.stop() == 0
        merged_line = next(line for line in served.output.splitlines() if "pr merged" in line)
        assert f"sha={git_repo.tip('main')}" in merged_line
        assert "worker stopped" in served.output.splitlines()[-1]
    logs = list((tmp_path / "data" / "ci" / "logs").glob("*.log"))
    assert len(logs) >= 2  # one per run, kept after the run
    branches = git_repo.git("for-each-ref", "refs/heads/keepgreen-merge")
    assert branches == ""  # test branches are deleted when their runs end


def test_a_bad_log_setting_is_one_line_naming_it(env: dict[str, str], workdir: Path) -> None:
    bad = {**env, "KEEPGREEN_LOG_FORMAT": "xml", "KEEPGREEN_LOG_LEVEL": "loud"}
    for command in (["serve"], ["worker"]):
        result = keepgreen(*command, env=bad, cwd=workdir, check=False)
        assert result.returncode == 2
        assert result.stderr.splitlines() == [
            "error: KEEPGREEN_LOG_FORMAT: Input should be 'console' or 'json'",
            "error: KEEPGREEN_LOG_LEVEL: Input should be 'debug', 'info', 'warning' or 'error'",
        ]
