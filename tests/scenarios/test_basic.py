"""The queue's core promise on real git: test on the predicted branch, merge only what passed."""

from __future__ import annotations

from tests.support.scenario import Scenario


def test_a_bad_pr_between_two_good_ones_fails_and_never_lands(scenario: Scenario) -> None:
    scenario.create_queue()
    scenario.pr(1, {"a.txt": "a\n"}, title="Add a")
    scenario.pr(2, {"b.txt": "b\n"}, title="Add b", bad=True)
    scenario.pr(3, {"c.txt": "c\n"}, title="Add c")
    for number in (1, 2, 3):
        scenario.submit(number)
    scenario.settle()
    assert scenario.final() == {
        1: ("merged", "merged_by_queue"),
        2: ("failed", "tests_failed"),
        3: ("merged", "merged_by_queue"),
    }
    assert scenario.main_log() == ["Add c (#3)", "Add a (#1)", "initial commit"]
    assert "BAD-2" not in scenario.main_files()
    assert scenario.test_branches() == []
