"""An effect that fails is left in the outbox, retried at the next pass, and the log says so."""

from __future__ import annotations

import pytest

from keepgreen.adapters.git.local_host import LocalGitHost
from keepgreen.app.ports import CodeHostError
from keepgreen.core.model import Repository
from tests.conftest import LogLines
from tests.support.scenario import Scenario

QUEUE = "github.com/acme/widgets:main"


class DeletesFailTwice(LocalGitHost):
    """The local host, whose first two branch deletions fail as a flaky server's would."""

    def __init__(self) -> None:
        super().__init__()
        self.failures = 2

    def delete_branch(self, repo: Repository, branch: str) -> None:
        if self.failures:
            self.failures -= 1
            msg = "the remote end hung up unexpectedly"
            raise CodeHostError(msg)
        super().delete_branch(repo, branch)


@pytest.fixture
def code_host() -> DeletesFailTwice:
    return DeletesFailTwice()


def test_a_failed_effect_is_retried_and_says_so(scenario: Scenario, log_lines: LogLines) -> None:
    scenario.create_queue()
    scenario.pr(1, {"a.txt": "a\n"})
    scenario.submit(1)

    scenario.settle()

    assert scenario.final() == {1: ("merged", "merged_by_queue")}
    assert scenario.test_branches() == []
    retries = log_lines.events("effect failed; retried next pass")
    assert [(line["effect"], line["attempt"]) for line in retries] == [
        ("DeleteTestBranch", 1),
        ("DeleteTestBranch", 2),
    ]
    assert retries[0]["error"] == "the remote end hung up unexpectedly"
    assert "exception" not in retries[0]  # a host error is one line, not a traceback
    (recovered,) = log_lines.events("effect succeeded after retries")
    assert recovered["effect"] == "DeleteTestBranch"
    assert recovered["queue"] == QUEUE
