"""Faults of a repository's git server, met by a real queue on a real server (smart HTTP with
basic auth): each is an incident in the queue's and the PR's answers, with a reason and no
secret, and the queue resumes by itself once the fault is gone. Nothing lands untested.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from keepgreen.bootstrap import Container
from keepgreen.core.enums import TestRunStatus
from keepgreen.core.model import GitAuth, RepoRef
from tests.conftest import FakeClock
from tests.support.gitrepo import GitRepo
from tests.support.gitservers import free_port, http_git_server
from tests.support.processes import all_command_lines
from tests.support.scenario import Scenario
from tests.support.served import ServedRepository
from tests.support.telemetry import sample
from tests.support.wire import Api, repo_json

SERVED = RepoRef("git.example.test", "acme", "faulty")
TOKEN = "glpat-FaultTokenNeverShown52"
WRONG = "glpat-WrongTokenNeverShown09"
USER = "x-access-token"
OUTAGE_SECONDS = 60


@pytest.fixture
def extra_settings() -> dict[str, Any]:
    # A real backoff, short enough for a test: a failing server is tried 1 s, then 2 s apart.
    return {"git_retry_max_seconds": 2.0}


@dataclass
class Faulty(ServedRepository):
    """A queue on a served repository whose server can be stopped and started again."""

    scenario: Scenario
    work: GitRepo
    base: Path
    bare: Path
    token_file: Path
    port: int
    server: Any = None

    def start(self) -> None:
        self.server = http_git_server(self.base, user=USER, password=TOKEN, port=self.port)
        self.server.__enter__()

    def stop(self) -> None:
        self.server.__exit__(None, None, None)
        self.server = None

    def answers(self, number: int) -> str:
        """Everything the API says of the queue and PR `number`, as text."""
        return str(self.scenario.get_queue()) + str(self.scenario.get_pr(number))

    def pass_runs(self) -> None:
        """The team's CI: every run under test passes."""
        for run in self.scenario.open_runs():
            if run.status is TestRunStatus.IN_PROGRESS and run.sha is not None:
                self.scenario.set_status(run.sha, "success")

    def prs_testing(self, count: int = 1) -> None:
        """A queue with PRs 1 ("Add a"), 2 ("Add b"), ... on the server, submitted, and a run
        testing.
        """
        self.scenario.create_queue()
        names = "abcdefgh"[:count]
        for number, name in enumerate(names, start=1):
            self.scenario.pr(number, {f"{name}.txt": f"{name}\n"}, title=f"Add {name}")
        self.publish()
        for number in range(1, count + 1):
            self.scenario.submit(number)
        _testing(self)

    def pass_until(self, states: dict[int, str], *, seconds: float = 30) -> None:
        """Work, passing every run, until the PRs are in `states`."""

        def reached() -> bool:
            self.pass_runs()
            return self.scenario.states() == states

        self.scenario.wait_for(reached, seconds=seconds)


@pytest.fixture
def faulty(
    container: Container, client: TestClient, token: str, tmp_path: Path, clock: FakeClock
) -> Iterator[Faulty]:
    work = GitRepo(tmp_path / "work")
    base = tmp_path / "served"
    base.mkdir()
    bare = base / "faulty.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(work.path), str(bare)], check=True)
    token_file = tmp_path / "secrets" / "token"
    token_file.parent.mkdir()
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    port = free_port()
    api = Api(client, token, repo_json(SERVED))
    scenario = Scenario(container=container, api=api, repo=work, clock=clock, ci_answers=False)
    served = Faulty(scenario, work, base, bare, token_file, port)
    served.start()
    container.admin.add_repository(
        org_slug="acme",
        ref=SERVED,
        git_url=f"http://127.0.0.1:{port}/faulty.git",
        ci_command=None,
        auth=GitAuth(token_file=str(token_file)),
    )
    try:
        yield served
    finally:
        if served.server is not None:
            served.stop()
    assert not [line for line in all_command_lines() if TOKEN in line or WRONG in line]


def _testing(faulty: Faulty) -> None:
    faulty.scenario.wait_for(
        lambda: any(r.sha is not None for r in faulty.scenario.open_runs()), seconds=30
    )


def test_a_refused_token_is_an_incident_of_the_queue_and_the_pr_until_it_is_fixed(
    faulty: Faulty, caplog: pytest.LogCaptureFixture
) -> None:
    scenario = faulty.scenario
    faulty.prs_testing()

    faulty.token_file.write_text(WRONG + "\n")  # rotated on the server, not here
    scenario.wait_for(lambda: scenario.get_queue()["waitingOn"] is not None, seconds=15)

    queue = scenario.get_queue()
    assert "refused keepgreen's credentials" in queue["waitingOn"]
    assert str(faulty.token_file) in queue["waitingOn"]  # which file to fix
    (incident,) = queue["incidents"]
    assert (incident["kind"], incident["prNumber"], incident["endedAt"]) == (
        "credentials_refused",
        None,
        None,
    )
    assert incident["failures"] >= 1
    assert scenario.get_pr(1)["incidents"] == [incident]  # the PR's answer tells it too
    assert sample(scenario.container, "keepgreen_queues_waiting_on_git_host") == 1
    # Meanwhile the run's success cannot land anything: the server cannot be read.
    faulty.pass_runs()
    scenario.work()
    assert scenario.states() == {1: "testing"}

    faulty.token_file.write_text(TOKEN + "\n")
    scenario.wait_for(lambda: scenario.get_queue()["waitingOn"] is None, seconds=15)
    (ended,) = scenario.get_queue()["incidents"]
    assert ended["endedAt"] is not None
    assert sample(scenario.container, "keepgreen_queues_waiting_on_git_host") == 0
    failures = "keepgreen_git_host_failures_total"
    assert sample(scenario.container, failures, kind="credentials_refused") >= 1

    faulty.pass_until({1: "merged"}, seconds=30)
    assert faulty.main_log() == ["Add a (#1)", "initial commit"]
    for secret in (TOKEN, WRONG):
        assert secret not in faulty.answers(1)
        assert secret not in caplog.text


def test_a_server_stopped_and_started_again_is_waited_for_and_the_queue_resumes(
    faulty: Faulty,
) -> None:
    scenario = faulty.scenario
    faulty.prs_testing(2)

    faulty.stop()
    scenario.wait_for(lambda: scenario.get_queue()["waitingOn"] is not None, seconds=15)
    waiting = scenario.get_queue()["waitingOn"]
    assert "nothing answers at the server's address" in waiting
    assert f"127.0.0.1:{faulty.port}" in waiting
    faulty.pass_runs()  # CI reports while the server is away: kept, landed later
    # A minute down, with the worker passing four times a second: the queue is tried again
    # 1, 2, 2, ... s apart (this module's cap), not at every pass.
    passes = 0
    down_until = time.monotonic() + OUTAGE_SECONDS
    while time.monotonic() < down_until:
        scenario.work()
        passes += 1
        time.sleep(0.25)
    (incident,) = scenario.get_queue()["incidents"]
    assert incident["endedAt"] is None
    assert OUTAGE_SECONDS / 2 - 5 <= incident["failures"] <= OUTAGE_SECONDS / 2 + 5 < passes
    assert set(scenario.states().values()) <= {"testing", "tests_passed", "pending"}
    assert faulty.main_log() == ["initial commit"]

    faulty.start()

    faulty.pass_until({1: "merged", 2: "merged"}, seconds=60)
    assert faulty.main_log() == ["Add b (#2)", "Add a (#1)", "initial commit"]
    (incident,) = scenario.get_queue()["incidents"]
    assert (incident["kind"], incident["endedAt"] is not None) == ("unreachable", True)
    scenario.wait_for(lambda: faulty.branches() == ["main"], seconds=15)


def test_a_landing_refused_by_a_server_hook_fails_the_pr_with_the_servers_words(
    faulty: Faulty,
) -> None:
    scenario = faulty.scenario
    faulty.prs_testing()
    hook = faulty.bare / "hooks" / "pre-receive"
    hook.write_text(
        "#!/bin/sh\n"
        "while read old new ref; do\n"
        '  if [ "$ref" = refs/heads/main ]; then\n'
        "    echo 'main is frozen for the release' >&2; exit 1\n"
        "  fi\n"
        "done\n"
    )
    hook.chmod(0o755)
    before = faulty.git("rev-parse", "main")

    faulty.pass_until({1: "failed"}, seconds=30)
    assert scenario.final() == {1: ("failed", "push_rejected")}
    assert faulty.git("rev-parse", "main") == before  # nothing landed
    (incident,) = scenario.get_pr(1)["incidents"]
    assert (incident["kind"], incident["prNumber"]) == ("push_rejected", 1)
    assert "main is frozen for the release" in incident["message"]
    assert "pre-receive hook declined" in incident["message"]
    assert incident["endedAt"] is not None  # an event: the PR left with it
    assert scenario.get_queue()["waitingOn"] is None  # the queue itself goes on
    scenario.wait_for(lambda: faulty.branches() == ["main"], seconds=15)


def test_a_target_branch_deleted_on_the_server_holds_the_queue_until_it_is_back(
    faulty: Faulty,
) -> None:
    scenario = faulty.scenario
    faulty.prs_testing()
    tip = faulty.git("rev-parse", "main")

    faulty.git("update-ref", "-d", "refs/heads/main")
    scenario.wait_for(lambda: scenario.get_queue()["waitingOn"] is not None, seconds=15)
    assert "the branch main does not exist" in scenario.get_queue()["waitingOn"]
    faulty.pass_runs()
    for _ in range(5):
        scenario.work()
    assert "main" not in faulty.branches()  # nothing was pushed in its place

    faulty.git("update-ref", "refs/heads/main", tip)

    faulty.pass_until({1: "merged"}, seconds=30)
    assert faulty.main_log() == ["Add a (#1)", "initial commit"]
    (incident,) = scenario.get_queue()["incidents"]
    assert (incident["kind"], incident["endedAt"] is not None) == ("target_branch_missing", True)


def test_a_target_branch_force_pushed_back_is_told_and_the_pr_tested_again(
    faulty: Faulty,
) -> None:
    scenario = faulty.scenario
    scenario.create_queue()
    start = scenario.repo.tip("main")
    scenario.pr(1, {"a.txt": "a\n"}, title="Add a")
    scenario.push_to_main({"f.txt": "later\n"}, "a commit that will be taken back")
    faulty.publish()
    scenario.submit(1)
    _testing(faulty)
    first = next(r for r in scenario.open_runs() if r.sha is not None)

    faulty.git("update-ref", "refs/heads/main", start)  # force-pushed back
    scenario.wait_for(lambda: scenario.get_queue()["incidents"] != [], seconds=15)
    (incident,) = scenario.get_queue()["incidents"]
    assert incident["kind"] == "target_branch_rewound"
    assert "force-pushed back" in incident["message"]
    scenario.set_status(first.sha or "", "success")  # the old run's result must not land

    faulty.pass_until({1: "merged"}, seconds=30)
    assert faulty.main_log() == ["Add a (#1)", "initial commit"]
    assert "f.txt" not in faulty.git("ls-tree", "--name-only", "main").split()


def test_a_pr_head_force_pushed_on_the_server_while_queued_is_cancelled_as_pushed_to(
    faulty: Faulty,
) -> None:
    scenario = faulty.scenario
    faulty.prs_testing(2)

    scenario.push_to_pr(1, {"a.txt": "a, amended\n"}, "amend a")
    faulty.publish()
    scenario.wait_for(lambda: scenario.states()[1] == "cancelled", seconds=15)

    faulty.pass_until({1: "cancelled", 2: "merged"}, seconds=30)
    assert scenario.final()[1] == ("cancelled", "pushed_to")
    assert faulty.main_log() == ["Add b (#2)", "initial commit"]
