"""The built-in CI runner: a repository's ci_command decides the queue's runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from keepgreen.bootstrap import Container
from keepgreen.core.model import RepoRef
from tests.conftest import FakeClock
from tests.support.gitrepo import GitRepo
from tests.support.scenario import Scenario
from tests.support.wire import Api, repo_json

GADGETS = RepoRef("github.com", "acme", "gadgets")
# Fails when the checkout holds a BAD-<n> marker, passes otherwise.
CI_COMMAND = "! ls BAD-* >/dev/null 2>&1"


@pytest.fixture
def runner_scenario(
    container: Container, client: TestClient, token: str, tmp_path: Path, clock: FakeClock
) -> Scenario:
    """A second repository of acme, registered with a ci_command, and a Scenario on it whose
    scripted CI stays silent (the built-in runner answers instead).
    """
    repo = GitRepo(tmp_path / "gadgets")
    container.admin.add_repository(
        org_slug="acme", ref=GADGETS, git_url=str(repo.path), ci_command=CI_COMMAND
    )
    api = Api(client, token, repo_json(GADGETS))
    return Scenario(container=container, api=api, repo=repo, clock=clock, ci_answers=False)


def test_builtin_runner_passes_the_good_pr_and_fails_the_bad_one(
    runner_scenario: Scenario, container: Container
) -> None:
    """The queue has no required-status override, so it requires `keepgreen/ci`, which the
    built-in runner reports by running the repository's ci_command on each test commit in a
    checkout of its own. PR 1 is good and merges; PR 2 adds a BAD file and fails with
    tests_failed. Each run leaves its log under <data dir>/ci/logs/.
    """
    scenario = runner_scenario
    scenario.create_queue(statuses=[])
    assert scenario.get_queue()["requiredStatuses"] in (None, [])
    scenario.pr(1, {"a.txt": "a\n"}, title="Add a")
    scenario.pr(2, {"b.txt": "b\n"}, title="Add b", bad=True)
    scenario.submit(1)
    scenario.submit(2)

    scenario.work()
    run = scenario.open_run_testing(1)
    assert run.required_statuses == ("keepgreen/ci",)
    details = scenario.testing_details(run.id)
    assert details["requiredStatuses"] == ["keepgreen/ci"]

    scenario.wait_for(
        lambda: all(state in ("merged", "failed") for state in scenario.states().values())
    )

    assert scenario.final() == {
        1: ("merged", "merged_by_queue"),
        2: ("failed", "tests_failed"),
    }
    assert scenario.main_log() == ["Add a (#1)", "initial commit"]
    assert scenario.main_files() == {"README.md", "a.txt"}
    logs = container.settings.data_dir / "ci" / "logs"
    assert (logs / f"{run.id}.log").is_file()
    assert "exit code 0" in (logs / f"{run.id}.log").read_text()
    failed = [r for r in scenario.all_runs() if r.status.value == "failed"]
    assert failed
    assert "exit code 1" in (logs / f"{failed[-1].id}.log").read_text()
    assert scenario.test_branches() == []
