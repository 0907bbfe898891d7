"""A queue with nothing to wait for: no required statuses and no built-in CI."""

from __future__ import annotations

from tests.support.scenario import Scenario


def test_pr_fails_when_the_queue_has_no_required_statuses(scenario: Scenario) -> None:
    """The queue's required-status override is deleted and the repository has no ci_command,
    so no test run could ever pass: submitted PRs fail with no_required_statuses instead of
    waiting forever, and nothing lands.
    """
    scenario.create_queue()
    config = scenario.update_queue(deleteRequiredStatuses=True)
    assert config["requiredStatuses"] in (None, [])
    scenario.pr(1, {"a.txt": "a\n"}, title="Add a")
    scenario.pr(2, {"b.txt": "b\n"}, title="Add b")
    scenario.submit(1)
    scenario.submit(2)

    scenario.settle()

    assert scenario.final() == {
        1: ("failed", "no_required_statuses"),
        2: ("failed", "no_required_statuses"),
    }
    assert scenario.main_log() == ["initial commit"]
    assert scenario.all_runs() == []
    assert scenario.test_branches() == []
