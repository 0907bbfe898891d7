"""A commit pushed to main behind the queue's back: everything is re-tested on top of it."""

from __future__ import annotations

from tests.support.scenario import Scenario


def test_commit_pushed_to_main_restarts_runs_and_is_kept(scenario: Scenario) -> None:
    """Concurrency 2: PRs 1 and 2 are testing when someone pushes a commit straight to main.
    The runs' predicted branches no longer start from main's tip: both are abandoned (reason
    target_branch_moved) and tested again on the new tip, even though CI then reports the old
    runs green. Both PRs merge on top of the foreign commit, which stays in main's history.
    """
    scenario.create_queue(concurrency=2)
    scenario.pr(1, {"a.txt": "a\n"}, title="Add a")
    scenario.pr(2, {"b.txt": "b\n"}, title="Add b")
    scenario.submit(1)
    scenario.submit(2)
    scenario.work()
    old_runs = {run.id for run in scenario.open_runs()}
    assert len(old_runs) == 2

    foreign = scenario.push_to_main({"foreign.txt": "hi\n"}, "Foreign change")
    assert scenario.answer_ci() == 2  # the old runs pass, too late to count
    scenario.work()

    assert "target_branch_moved" in scenario.reasons(1)
    assert "target_branch_moved" in scenario.reasons(2)
    new_runs = scenario.open_runs()
    assert {run.id for run in new_runs}.isdisjoint(old_runs)
    assert {run.base_sha for run in new_runs} == {foreign}

    scenario.settle()

    assert scenario.final() == {
        1: ("merged", "merged_by_queue"),
        2: ("merged", "merged_by_queue"),
    }
    assert scenario.main_log() == ["Add b (#2)", "Add a (#1)", "Foreign change", "initial commit"]
    assert scenario.main_files() == {"README.md", "a.txt", "b.txt", "foreign.txt"}
    assert foreign in scenario.main_commits()
    assert scenario.test_branches() == []


def test_commit_pushed_to_main_while_a_pr_waits_to_land(scenario: Scenario) -> None:
    """PR 1 passed and its landing is decided in the same pass that reads the result; a
    foreign commit pushed right after PR 1's run passed, before the landing pass, makes the
    landing's compare-and-swap fail. PR 1 is re-tested on the new tip and merges on top of
    the foreign commit, which is never lost.
    """
    scenario.create_queue()
    scenario.pr(1, {"a.txt": "a\n"}, title="Add a")
    scenario.submit(1)
    scenario.work()
    assert scenario.answer_ci() == 1
    foreign = scenario.push_to_main({"foreign.txt": "hi\n"}, "Foreign change")

    scenario.settle()

    assert scenario.final() == {1: ("merged", "merged_by_queue")}
    assert scenario.main_log() == ["Add a (#1)", "Foreign change", "initial commit"]
    assert scenario.main_files() == {"README.md", "a.txt", "foreign.txt"}
    assert foreign in scenario.main_commits()
    assert "target_branch_moved" in scenario.reasons(1)
