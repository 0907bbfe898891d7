"""Anti-flake protection: a failure forgiven because a later run that included the PR passed."""

from __future__ import annotations

from tests.support.scenario import Scenario


def test_flaky_failure_is_cleared_by_a_passing_successor(scenario: Scenario) -> None:
    """Concurrency 2, pendingFailureDepth 1 and optimistic merging: PR 1's run flakes (fails
    once), while PR 2's run, which holds PR 1 too, passes. PR 1 waits in pending_failure for
    its successor, is cleared by it, and both merge in order.
    """
    scenario.create_queue(concurrency=2, pendingFailureDepth=1, canOptimisticallyMerge=True)
    scenario.flaky_once = {1}
    scenario.pr(1, {"a.txt": "a\n"}, title="Add a")
    scenario.pr(2, {"b.txt": "b\n"}, title="Add b")
    scenario.submit(1)
    scenario.submit(2)

    scenario.settle()

    assert scenario.final() == {
        1: ("merged", "merged_by_queue"),
        2: ("merged", "merged_by_queue"),
    }
    assert scenario.main_log() == ["Add b (#2)", "Add a (#1)", "initial commit"]
    assert scenario.main_files() == {"README.md", "a.txt", "b.txt"}
    history = [(change.to_state.value, change.reason.value) for change in scenario.history(1)]
    assert history[-3:] == [
        ("pending_failure", "tests_failed"),
        ("tests_passed", "cleared_by_successor"),
        ("merged", "merged_by_queue"),
    ]
    # Nothing was tested again: one run each.
    assert scenario.started == [((), (1,)), ((1,), (2,))]


def test_flaky_failure_fails_the_pr_without_anti_flake_protection(scenario: Scenario) -> None:
    """The same flake with pendingFailureDepth 0 and no optimistic merging: PR 1 fails at once;
    PR 2's run held PR 1, so PR 2 is tested again on main alone and merges.
    """
    scenario.create_queue(concurrency=2, pendingFailureDepth=0, canOptimisticallyMerge=False)
    scenario.flaky_once = {1}
    scenario.pr(1, {"a.txt": "a\n"}, title="Add a")
    scenario.pr(2, {"b.txt": "b\n"}, title="Add b")
    scenario.submit(1)
    scenario.submit(2)

    scenario.settle()

    assert scenario.final() == {
        1: ("failed", "tests_failed"),
        2: ("merged", "merged_by_queue"),
    }
    assert scenario.main_log() == ["Add b (#2)", "initial commit"]
    assert scenario.main_files() == {"README.md", "b.txt"}
    assert "cleared_by_successor" not in scenario.reasons(1)
    assert scenario.started == [((), (1,)), ((1,), (2,)), ((), (2,))]


def test_a_real_failure_is_not_forgiven(scenario: Scenario) -> None:
    """Anti-flake protection on (pendingFailureDepth 1, optimistic merging), concurrency 3:
    PR 2 is really bad, so the run of PR 3, which holds PR 2, fails too and cannot clear it.
    PR 1 merges, PR 2 fails, PR 3 is tested again without PR 2 and merges.
    """
    scenario.create_queue(concurrency=3, pendingFailureDepth=1, canOptimisticallyMerge=True)
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
    assert scenario.main_files() == {"README.md", "a.txt", "c.txt"}
    assert "cleared_by_successor" not in scenario.reasons(2)
