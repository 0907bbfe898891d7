"""`promtool check metrics` on both metrics endpoints, after real traffic: a queue with the
built-in CI merging one PR, failing one, restarting and cancelling others, a JUnit upload, and
a stray request. /metrics must be lint-clean; getMergeQueueMetrics may differ only by the two
rolling one-hour gauges the interface names `_total` (trunk-v1-api.md §6).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from keepgreen.bootstrap import Container
from keepgreen.core.model import RepoRef
from tests.conftest import FakeClock
from tests.support.gitrepo import GitRepo
from tests.support.scenario import Scenario
from tests.support.telemetry import JUNIT, operator_settings, post_junit, scrape
from tests.support.wire import Api, repo_json

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
# The interface's rolling one-hour gauges: named `_total`, kept as the interface names them.
INTERFACE_WARNINGS = {
    'mq_pr_conclusions_1h_total non-counter metrics should not have "_total" suffix',
    'mq_pr_restarts_1h_total non-counter metrics should not have "_total" suffix',
}
GADGETS = RepoRef("github.com", "acme", "gadgets")
CI_COMMAND = "! ls BAD-* >/dev/null 2>&1"  # fails when the checkout holds a BAD-<n> marker


def promtool_problems(text: str) -> set[str]:
    """What `promtool check metrics` says about `text`, one problem a line; empty when clean."""
    if not Path(PROMTOOL).is_file():
        pytest.fail(
            "promtool is missing: install Debian's `prometheus` package "
            "(apt-get install prometheus; .ci/run does)"
        )
    result = subprocess.run(
        [PROMTOOL, "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    problems = {line.strip() for line in (result.stdout + result.stderr).splitlines()}
    problems.discard("")
    assert (result.returncode == 0) == (not problems), (result.returncode, problems)
    return problems


@pytest.fixture
def extra_settings(tmp_path: Path) -> dict[str, Any]:
    """The container's settings open GET /metrics with the operator's token."""
    return operator_settings(tmp_path)


@pytest.fixture
def busy(container: Container, client: TestClient, token: str, tmp_path: Path) -> Api:
    """Real traffic through the API, the worker and the built-in CI; the API of its repo."""
    repo = GitRepo(tmp_path / "gadgets")
    container.admin.add_repository(
        org_slug="acme", ref=GADGETS, git_url=str(repo.path), ci_command=CI_COMMAND
    )
    api = Api(client, token, repo_json(GADGETS))
    scenario = Scenario(
        container=container, api=api, repo=repo, clock=FakeClock(), ci_answers=False
    )
    scenario.create_queue(statuses=[])
    scenario.pr(1, {"a.txt": "a\n"})
    scenario.pr(2, {"b.txt": "b\n"}, bad=True)
    scenario.pr(3, {"c.txt": "c\n"})
    for number in (1, 2, 3):
        scenario.submit(number)
    scenario.cancel(3)
    scenario.work()
    scenario.restart(1)  # testing -> pending; its run is cancelled (CancelCi)
    scenario.wait_for(
        lambda: scenario.states() == {1: "merged", 2: "failed", 3: "cancelled"}, seconds=60
    )
    assert post_junit(api, JUNIT) == 200
    assert client.get("/no/such/path").status_code == 404
    # The GitHub App's budget gauges, as its client records each answer's rate-limit headers
    # (no App here: tests/adapters/test_github_client.py has them from a fake GitHub).
    container.telemetry.github_budget(41, limit=5000, remaining=4998)
    return api


def test_promtool_finds_what_it_should(tmp_path: Path) -> None:
    """The checker itself: a counter without `_total` is reported (else a silent promtool
    would pass every test below).
    """
    problems = promtool_problems("# HELP x_seconds x\n# TYPE x_seconds counter\nx_seconds 1\n")
    assert problems == {'x_seconds counter metrics should have "_total" suffix'}


def test_both_endpoints_pass_promtool_after_real_traffic(busy: Api) -> None:
    service = scrape(busy.client)
    families = list(text_string_to_metric_families(service))
    ours = [family for family in families if family.name.startswith("keepgreen_")]
    assert len(ours) >= 25
    # Every family has samples, so promtool checked real sample lines of each.
    assert [family.name for family in ours if not family.samples] == []
    assert promtool_problems(service) == set()

    for headers in (
        {"x-api-token": busy.token},
        {"authorization": f"Bearer {busy.token}"},
    ):
        response = busy.client.get("/v1/getMergeQueueMetrics", headers=headers)
        assert response.status_code == 200, response.text
        queue_families = list(text_string_to_metric_families(response.text))
        assert [family.name for family in queue_families if not family.samples] == []
        assert promtool_problems(response.text) == INTERFACE_WARNINGS
