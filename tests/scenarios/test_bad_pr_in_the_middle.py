"""A bad PR between good ones: the good ones merge, the bad one fails, main never holds it."""

from __future__ import annotations

from tests.support.scenario import Scenario


def test_serial_queue_drops_the_bad_pr_and_merges_the_others(scenario: Scenario) -> None:
    """A, B and C are submitted to a queue testing one PR at a time; B breaks the build. A is
    tested on main and merges, B is tested on top of A and fails, C is tested on top of A only
    and merges. Main's history is A then C, and B's file never reaches main.
    """
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
    assert scenario.main_files() == {"README.md", "a.txt", "c.txt"}
    # A has landed by the time C starts, so C is tested on main alone.
    assert scenario.started == [((), (1,)), ((1,), (2,)), ((), (3,))]
    assert scenario.test_branches() == []


def test_concurrent_queue_starts_every_predicted_branch_in_one_pass(scenario: Scenario) -> None:
    """With concurrency 3 the first worker pass starts all three runs at once, each on the
    branch main would be if the PRs ahead merged: A, A+B and A+B+C. The testing details of
    C's run name its branch `keepgreen-merge/pr-3/<run id>` at the built commit, C as the
    tested PR and A, B as the PRs it depends on.
    """
    scenario.create_queue(concurrency=3)
    scenario.pr(1, {"a.txt": "a\n"}, title="Add a")
    scenario.pr(2, {"b.txt": "b\n"}, title="Add b", bad=True)
    scenario.pr(3, {"c.txt": "c\n"}, title="Add c")
    for number in (1, 2, 3):
        scenario.submit(number)

    scenario.work()

    assert scenario.open_numbers() == [((), (1,)), ((1,), (2,)), ((1, 2), (3,))]
    assert scenario.states() == {1: "testing", 2: "testing", 3: "testing"}
    run = scenario.open_run_testing(3)
    details = scenario.testing_details(run.id)
    assert details["testBranch"] == f"keepgreen-merge/pr-3/{run.id}"
    assert details["testBranchSha"] == run.sha
    assert scenario.repo.tip(f"refs/heads/{details['testBranch']}") == run.sha
    assert [pr["prNumber"] for pr in details["testedPullRequests"]] == [3]
    assert details["dependentPrs"] == [1, 2]
    assert details["status"] == "in_progress"
    assert details["requiredStatuses"] == ["ci"]
    # The test commit is main with A, B and C merged in that order.
    assert set(scenario.repo.files(run.sha)) == {"README.md", "a.txt", "b.txt", "BAD-2", "c.txt"}
    assert [link.number for link in run.chain] == [1, 2, 3]
    assert scenario.repo.parents(run.chain[0].commit)[0] == run.base_sha
    assert run.base_sha == scenario.repo.tip("main")
    assert len(scenario.test_branches()) == 3


def test_concurrent_queue_drops_the_bad_pr_when_two_runs_fail_together(
    scenario: Scenario,
) -> None:
    """Concurrency 3, B bad: A, A+B and A+B+C are tested at once (A+B+C started a pass later,
    after the concurrency went from 2 to 3). CI reports all three before the next worker pass:
    A passed, A+B and A+B+C failed. B is the culprit; C's run included B, so C is tested again
    on A alone. A and C merge, B fails, and B's file never reaches main.

    Regression: this pass used to crash with a KeyError in `resolve_failures` (decide.py):
    B's run was resolved first (the older run), B was failed and removed from the entries, and
    C's failed run then looked B up as a PR ahead of it; every later pass crashed the same way.
    """
    scenario.create_queue(concurrency=2)
    scenario.pr(1, {"a.txt": "a\n"}, title="Add a")
    scenario.pr(2, {"b.txt": "b\n"}, title="Add b", bad=True)
    scenario.pr(3, {"c.txt": "c\n"}, title="Add c")
    for number in (1, 2, 3):
        scenario.submit(number)
    scenario.work()
    scenario.clock.advance(seconds=1)
    scenario.update_queue(concurrency=3)
    scenario.work()
    assert scenario.open_numbers() == [((), (1,)), ((1,), (2,)), ((1, 2), (3,))]
    assert scenario.answer_ci() == 3

    scenario.settle()

    assert scenario.final() == {
        1: ("merged", "merged_by_queue"),
        2: ("failed", "tests_failed"),
        3: ("merged", "merged_by_queue"),
    }
    assert scenario.main_log() == ["Add c (#3)", "Add a (#1)", "initial commit"]
    assert scenario.main_files() == {"README.md", "a.txt", "c.txt"}
    assert scenario.started[3:] == [((1,), (3,))] or scenario.started[3:] == [((), (3,))]
    assert "predecessor_changed" in scenario.reasons(3)
    assert scenario.test_branches() == []
