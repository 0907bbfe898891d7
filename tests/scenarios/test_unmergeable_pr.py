"""A PR that does not merge onto main is never admitted, and does not hold up the queue."""

from __future__ import annotations

from tests.support.scenario import Scenario


def test_pr_conflicting_with_main_stays_not_ready(scenario: Scenario) -> None:
    """PR 1 rewrites README.md's line, but main changed that line after PR 1 branched off:
    it conflicts with main, reads not_mergeable, and stays not_ready. PR 2, submitted after
    it, is admitted, tested and merges.
    """
    initial = scenario.repo.tip("main")
    scenario.push_to_main({"README.md": "hello from main\n"}, "Main edit")
    scenario.create_queue()
    scenario.pr(1, {"README.md": "hello from one\n"}, title="One", base=initial)
    scenario.pr(2, {"two.txt": "2\n"}, title="Two")
    scenario.submit(1)
    scenario.submit(2)

    scenario.settle()

    assert scenario.final() == {
        1: ("not_ready", "submitted"),
        2: ("merged", "merged_by_queue"),
    }
    assert scenario.get_pr(1)["readiness"]["gitHubMergeability"] == "not_mergeable"
    assert scenario.main_log() == ["Two (#2)", "Main edit", "initial commit"]
    assert scenario.started == [((), (2,))]
