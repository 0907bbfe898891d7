"""A repository on a git server (smart HTTP with basic auth, a token file) queued end to end:
registered through the admin service, PRs submitted through the API, the worker merging on the
server; the server's main ends with exactly the good PR and no test branch is left there.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from keepgreen.adapters.git.remote_host import FETCH_INTERVAL_SECONDS, mirror_path
from keepgreen.bootstrap import Container
from keepgreen.core.enums import TestRunStatus
from keepgreen.core.model import GitAuth, RepoRef
from tests.conftest import FakeClock
from tests.support.gitrepo import GitRepo
from tests.support.gitservers import HttpGitServer, http_git_server
from tests.support.processes import all_command_lines
from tests.support.scenario import CI, Scenario
from tests.support.served import ServedRepository
from tests.support.telemetry import sample
from tests.support.wire import Api, repo_json

SERVED = RepoRef("git.example.test", "acme", "served")
TOKEN = "glpat-ScenarioTokenNeverShown31"
USER = "x-access-token"
# Fails when the checkout holds a BAD-<n> marker, passes otherwise.
CI_COMMAND = "! ls BAD-* >/dev/null 2>&1"


@dataclass
class OnServer(ServedRepository):
    """The scenario, the developer's clone its PRs are made in, and the served bare repo."""

    scenario: Scenario
    work: GitRepo
    bare: Path
    server: HttpGitServer
    pr_refs: str = "refs/pull"


def _on_server(
    container: Container,
    client: TestClient,
    token: str,
    tmp_path: Path,
    clock: FakeClock,
    *,
    ci_command: str | None,
    pr_refspec: str | None = None,
    test_branch_prefix: str | None = None,
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
            pr_refspec=pr_refspec,
            test_branch_prefix=test_branch_prefix,
        )
        api = Api(client, token, repo_json(SERVED))
        scenario = Scenario(container=container, api=api, repo=work, clock=clock, ci_answers=False)
        pr_refs = (pr_refspec or "refs/pull/{number}/head").split("/{number}/", 1)[0]
        yield OnServer(scenario, work, bare, server, pr_refs)
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


@pytest.fixture
def on_gitlab(
    container: Container, client: TestClient, token: str, tmp_path: Path, clock: FakeClock
) -> Iterator[OnServer]:
    """A GitLab-style server (merge request N at refs/merge-requests/N/head) whose team's CI
    builds the `trunk-merge/**` branches, as it did for the hosted service.
    """
    yield from _on_server(
        container,
        client,
        token,
        tmp_path,
        clock,
        ci_command=None,
        pr_refspec="refs/merge-requests/{number}/head",
        test_branch_prefix="trunk-merge",
    )


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


def _answer_from_the_server(served: OnServer) -> set[str]:
    """The team's CI: for each built run, the branch it finds on the server and its verdict
    (a BAD-<n> marker fails); the branches it found.
    """
    found = set()
    for run in served.scenario.open_runs():
        if run.status is not TestRunStatus.IN_PROGRESS or run.sha is None:
            continue
        branches = served.git("for-each-ref", "--format=%(refname:short) %(objectname)")
        assert f"{run.branch} {run.sha}" in branches.splitlines()
        found.add(run.branch)
        files = served.git("ls-tree", "-r", "--name-only", run.sha).splitlines()
        failing = any(name.startswith("BAD-") for name in files)
        served.scenario.set_status(run.sha, "failure" if failing else "success", context=CI)
    return found


def test_merge_requests_on_a_gitlab_style_server_are_tested_on_trunk_merge_branches(
    on_gitlab: OnServer,
) -> None:
    """Merge requests are read at refs/merge-requests/N/head; their test commits are pushed as
    `trunk-merge/pr-<N>/<test run id>`, which the team's CI builds, and deleted when their
    runs end.
    """
    served = on_gitlab
    scenario = served.scenario
    scenario.create_queue()
    scenario.pr(1, {"a.txt": "a\n"}, title="Add a")
    scenario.pr(2, {"b.txt": "b\n"}, title="Add b", bad=True)
    served.publish()
    assert served.git("for-each-ref", "--format=%(refname)", "refs/pull") == ""
    scenario.submit(1)
    scenario.submit(2)
    seen: set[str] = set()

    def ci_on_the_server() -> bool:
        seen.update(_answer_from_the_server(served))
        return all(state in ("merged", "failed") for state in scenario.states().values())

    scenario.wait_for(ci_on_the_server, seconds=60)

    assert scenario.final() == {1: ("merged", "merged_by_queue"), 2: ("failed", "tests_failed")}
    assert served.main_log() == ["Add a (#1)", "initial commit"]
    runs = scenario.all_runs()
    assert {run.branch for run in runs} == seen
    assert sorted(seen) == sorted(
        f"trunk-merge/pr-{scenario.numbers(run.tested_prs)[0]}/{run.id}" for run in runs
    )
    assert {branch.split("/")[1] for branch in seen} == {"pr-1", "pr-2"}
    scenario.wait_for(lambda: served.branches() == ["main"], seconds=10)  # all deleted


def test_a_pass_over_a_queue_of_several_prs_fetches_once_and_only_what_it_reads(
    with_external_ci: OnServer, container: Container
) -> None:
    """Three PRs queued, one testing: each worker pass (a fetch interval apart) runs one
    `git fetch`, and a branch pushed to the server that no queue reads never reaches the
    mirror.
    """
    served = with_external_ci
    scenario = served.scenario
    scenario.create_queue()
    for number in (1, 2, 3):
        scenario.pr(number, {f"{number}.txt": f"{number}\n"}, title=f"Add {number}")
    served.publish()
    for number in (1, 2, 3):
        scenario.submit(number)
    scenario.wait_for(lambda: any(r.sha is not None for r in scenario.open_runs()), seconds=30)
    served.work.git("push", "-q", str(served.bare), "pr-3:refs/heads/other")
    states = scenario.states()
    assert sorted(states.values()) == ["pending", "pending", "testing"]

    def fetches() -> float:
        return sum(
            sample(container, "keepgreen_git_calls_total", operation="fetch", result=result)
            for result in ("ok", "exit_nonzero", "error")
        )

    for _ in range(3):
        time.sleep(FETCH_INTERVAL_SECONDS + 0.1)  # the mirror is stale again
        before = fetches()
        scenario.work()
        assert fetches() == before + 1
    assert scenario.states() == states  # nothing changed meanwhile
    mirror = mirror_path(container.settings.data_dir, str(scenario.queue_row().repository_id))
    refs = subprocess.run(
        ["git", f"--git-dir={mirror}", "for-each-ref", "--format=%(refname)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert "refs/heads/other" not in refs
    assert {"refs/heads/main", "refs/pull/1/head", "refs/pull/2/head", "refs/pull/3/head"} <= set(
        refs
    )


def test_a_pr_ref_deleted_on_the_server_while_queued_cancels_that_pr_only(
    with_external_ci: OnServer,
) -> None:
    """PR 2's ref is deleted on the server (the PR was closed) while PR 1 tests and PR 3 waits:
    PR 2 is cancelled with pr_closed; PR 1 and PR 3 are tested and merged.
    """
    served = with_external_ci
    scenario = served.scenario
    scenario.create_queue()
    for number in (1, 2, 3):
        scenario.pr(number, {f"{number}.txt": f"{number}\n"}, title=f"Add {number}")
    served.publish()
    for number in (1, 2, 3):
        scenario.submit(number)
    scenario.wait_for(lambda: any(r.sha is not None for r in scenario.open_runs()), seconds=30)

    served.git("update-ref", "-d", "refs/pull/2/head")

    def ci_on_the_server() -> bool:
        _answer_from_the_server(served)
        return all(state in ("merged", "cancelled") for state in scenario.states().values())

    scenario.wait_for(ci_on_the_server, seconds=60)
    assert scenario.final() == {
        1: ("merged", "merged_by_queue"),
        2: ("cancelled", "pr_closed"),
        3: ("merged", "merged_by_queue"),
    }
    assert served.main_log() == ["Add 3 (#3)", "Add 1 (#1)", "initial commit"]
    scenario.wait_for(lambda: served.branches() == ["main"], seconds=10)
