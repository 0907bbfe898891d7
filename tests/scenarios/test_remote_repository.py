"""A repository on a git server (smart HTTP with basic auth, a token file) queued end to end:
registered through the admin service, PRs submitted through the API, the worker merging on the
server; the server's main ends with exactly the good PR and no test branch is left there.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from keepgreen.bootstrap import Container
from keepgreen.core.enums import TestRunStatus
from keepgreen.core.model import GitAuth, RepoRef
from tests.conftest import FakeClock
from tests.support.gitrepo import GitRepo
from tests.support.gitservers import HttpGitServer, http_git_server
from tests.support.processes import all_command_lines
from tests.support.scenario import CI, Scenario
from tests.support.wire import Api, repo_json

SERVED = RepoRef("git.example.test", "acme", "served")
TOKEN = "glpat-ScenarioTokenNeverShown31"
USER = "x-access-token"
# Fails when the checkout holds a BAD-<n> marker, passes otherwise.
CI_COMMAND = "! ls BAD-* >/dev/null 2>&1"


@dataclass
class OnServer:
    """The scenario, the developer's clone its PRs are made in, and the served bare repo."""

    scenario: Scenario
    work: GitRepo
    bare: Path
    server: HttpGitServer

    def publish(self) -> None:
        """The developers push: main and the PR heads reach the server."""
        self.work.git(
            "push", "-q", "--force", str(self.bare), "main:main", "refs/pull/*:refs/pull/*"
        )

    def git(self, *args: str) -> str:
        result = subprocess.run(
            ["git", f"--git-dir={self.bare}", *args], capture_output=True, text=True, check=True
        )
        return result.stdout.strip()

    def main_log(self) -> list[str]:
        return self.git("log", "--first-parent", "--format=%s", "main").splitlines()

    def main_files(self) -> set[str]:
        return set(self.git("ls-tree", "-r", "--name-only", "main").splitlines())

    def branches(self) -> list[str]:
        return self.git("for-each-ref", "--format=%(refname:short)", "refs/heads").split()


def _on_server(
    container: Container,
    client: TestClient,
    token: str,
    tmp_path: Path,
    clock: FakeClock,
    *,
    ci_command: str | None,
) -> Iterator[OnServer]:
    work = GitRepo(tmp_path / "work")
    base = tmp_path / "served"
    base.mkdir()
    bare = base / "served.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(work.path), str(bare)], check=True)
    token_file = tmp_path / "secrets" / "token"
    token_file.parent.mkdir()
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    with http_git_server(base, user=USER, password=TOKEN) as server:
        container.admin.add_repository(
            org_slug="acme",
            ref=SERVED,
            git_url=f"{server.url}/served.git",
            ci_command=ci_command,
            auth=GitAuth(token_file=str(token_file)),
        )
        api = Api(client, token, repo_json(SERVED))
        scenario = Scenario(container=container, api=api, repo=work, clock=clock, ci_answers=False)
        yield OnServer(scenario, work, bare, server)
        assert any(a is not None for a in server.authorizations)  # the token was sent
        assert not [line for line in server.processes if TOKEN in line]  # never in ps / env


@pytest.fixture
def with_builtin_ci(
    container: Container, client: TestClient, token: str, tmp_path: Path, clock: FakeClock
) -> Iterator[OnServer]:
    yield from _on_server(container, client, token, tmp_path, clock, ci_command=CI_COMMAND)


@pytest.fixture
def with_external_ci(
    container: Container, client: TestClient, token: str, tmp_path: Path, clock: FakeClock
) -> Iterator[OnServer]:
    yield from _on_server(container, client, token, tmp_path, clock, ci_command=None)


def test_the_builtin_runner_merges_the_good_pr_on_the_server(with_builtin_ci: OnServer) -> None:
    served = with_builtin_ci
    scenario = served.scenario
    scenario.create_queue(statuses=[])
    scenario.pr(1, {"a.txt": "a\n"}, title="Add a")
    scenario.pr(2, {"b.txt": "b\n"}, title="Add b", bad=True)
    served.publish()
    scenario.submit(1)
    scenario.submit(2)

    scenario.wait_for(
        lambda: all(state in ("merged", "failed") for state in scenario.states().values()),
        seconds=60,
    )

    assert scenario.final() == {1: ("merged", "merged_by_queue"), 2: ("failed", "tests_failed")}
    assert served.main_log() == ["Add a (#1)", "initial commit"]
    assert served.main_files() == {"README.md", "a.txt"}
    scenario.wait_for(lambda: served.branches() == ["main"], seconds=10)  # no test branch left
    assert TOKEN not in str(scenario.get_pr(1)) + str(scenario.get_queue())
    assert not [line for line in all_command_lines() if TOKEN in line]


def test_an_external_ci_reporting_statuses_merges_the_good_pr_on_the_server(
    with_external_ci: OnServer,
) -> None:
    """The team's own CI builds the test branches it finds on the server and reports through
    setCommitStatus: a test commit holding a BAD-<n> marker fails.
    """
    served = with_external_ci
    scenario = served.scenario
    scenario.create_queue()
    scenario.pr(1, {"a.txt": "a\n"}, title="Add a")
    scenario.pr(2, {"b.txt": "b\n"}, title="Add b", bad=True)
    served.publish()
    scenario.submit(1)
    scenario.submit(2)

    def ci_on_the_server() -> bool:
        for run in scenario.open_runs():
            if run.status is not TestRunStatus.IN_PROGRESS or run.sha is None:
                continue
            # What the team's CI sees: a branch on the server at the run's commit.
            tips = served.git("for-each-ref", "--format=%(objectname)", "refs/heads").split()
            assert run.sha in tips
            files = served.git("ls-tree", "-r", "--name-only", run.sha).splitlines()
            failing = any(name.startswith("BAD-") for name in files)
            scenario.set_status(run.sha, "failure" if failing else "success", context=CI)
        return all(state in ("merged", "failed") for state in scenario.states().values())

    scenario.wait_for(ci_on_the_server, seconds=60)

    assert scenario.final() == {1: ("merged", "merged_by_queue"), 2: ("failed", "tests_failed")}
    assert served.main_log() == ["Add a (#1)", "initial commit"]
    assert served.main_files() == {"README.md", "a.txt"}
    scenario.wait_for(lambda: served.branches() == ["main"], seconds=10)


def test_a_foreign_push_to_the_servers_main_while_testing_is_kept_and_the_pr_retested(
    with_external_ci: OnServer,
) -> None:
    """Someone pushes to the server's main while PR 1's run tests: the run's success does not
    land it over the foreign commit; PR 1 is tested again on the new tip and then lands on it.
    """
    served = with_external_ci
    scenario = served.scenario
    scenario.create_queue()
    scenario.pr(1, {"a.txt": "a\n"}, title="Add a")
    served.publish()
    scenario.submit(1)
    scenario.wait_for(lambda: any(r.sha is not None for r in scenario.open_runs()), seconds=30)
    first = next(r for r in scenario.open_runs() if r.sha is not None)

    scenario.sync_worktree()
    foreign = served.work.commit({"f.txt": "foreign\n"}, "a foreign push")
    served.publish()
    scenario.set_status(first.sha or "", "success")

    def answer() -> bool:
        for run in scenario.open_runs():
            if run.status is TestRunStatus.IN_PROGRESS and run.sha is not None:
                scenario.set_status(run.sha, "success")
        return scenario.states() == {1: "merged"}

    scenario.wait_for(answer, seconds=60)
    assert served.main_log() == ["Add a (#1)", "a foreign push", "initial commit"]
    assert served.git("rev-parse", "main~1") == foreign
    assert served.main_files() == {"README.md", "a.txt", "f.txt"}
    # The test branches go in the passes after the merge (effects of their own).
    scenario.wait_for(lambda: served.branches() == ["main"], seconds=10)
