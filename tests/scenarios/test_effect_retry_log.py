"""An effect that fails is left in the outbox, retried at the next pass, and the log says so."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from keepgreen.adapters.git.local_host import LocalGitHost
from keepgreen.app.ports import CodeHostError
from keepgreen.bootstrap import Container, bootstrap
from keepgreen.core.model import Repository
from keepgreen.settings import Settings
from tests.conftest import FakeClock, LogLines
from tests.support.scenario import Scenario

QUEUE = "github.com/acme/widgets:main"


class DeletesFailTwice(LocalGitHost):
    """The local host, whose first two branch deletions fail as a flaky server's would."""

    def __init__(self) -> None:
        self.failures = 2

    def delete_branch(self, repo: Repository, branch: str) -> None:
        if self.failures:
            self.failures -= 1
            msg = "the remote end hung up unexpectedly"
            raise CodeHostError(msg)
        super().delete_branch(repo, branch)


@pytest.fixture
def container(
    database_url: str, tmp_path: Path, clock: FakeClock, ci_control: Path
) -> Iterator[Container]:
    settings = Settings(
        database_url=database_url, data_dir=tmp_path / "data", ci_readonly_paths=str(ci_control)
    )
    built = bootstrap(settings, clock=clock, run_migrations=False, code_host=DeletesFailTwice())
    yield built
    built.close()


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
