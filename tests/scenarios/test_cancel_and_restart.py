"""Users cancel a PR or restart its tests through the API."""

from __future__ import annotations

from tests.support.scenario import Scenario


def test_cancelling_a_pr_in_the_middle_restarts_the_runs_that_held_it(scenario: Scenario) -> None:
    """Concurrency 3: 1, 1+2 and 1+2+3 are testing. PR 2 is cancelled through the API: its
    run stops and PR 3's run, which held PR 2, is replaced by one on 1 alone (reason
    predecessor_changed); PR 1's run is untouched. PRs 1 and 3 merge.
    """
    scenario.create_queue(concurrency=3)
    for number in (1, 2, 3):
        scenario.pr(number, {f"f{number}.txt": f"{number}\n"}, title=f"Add {number}")
        scenario.submit(number)
    scenario.work()
    first = scenario.open_run_testing(1).id
    cancelled_branch = scenario.open_run_testing(2).branch

    scenario.cancel(2)
    scenario.work()

    assert scenario.final()[2] == ("cancelled", "canceled_by_user")
    assert scenario.open_numbers() == [((), (1,)), ((1,), (3,))]
    assert scenario.open_run_testing(1).id == first
    assert f"refs/heads/{cancelled_branch}" not in scenario.test_branches()
    assert "predecessor_changed" in scenario.reasons(3)
    response = scenario.post("cancelPullRequest", pr={"number": 2})
    assert response.status_code == 404, response.text

    scenario.settle()

    assert scenario.final() == {
        1: ("merged", "merged_by_queue"),
        2: ("cancelled", "canceled_by_user"),
        3: ("merged", "merged_by_queue"),
    }
    assert scenario.main_log() == ["Add 3 (#3)", "Add 1 (#1)", "initial commit"]
    assert scenario.main_files() == {"README.md", "f1.txt", "f3.txt"}
    assert scenario.test_branches() == []


def test_restarting_a_testing_pr_tests_it_again_in_a_new_run(scenario: Scenario) -> None:
    """PR 1 is testing; restartTestsOnPullRequest abandons its run (its branch is deleted) and
    starts a new one on the same predicted branch (reason restart_requested). The old run's
    late green status counts for nothing; the new run passes and PR 1 merges.
    """
    scenario.create_queue()
    scenario.pr(1, {"a.txt": "a\n"}, title="Add a")
    scenario.submit(1)
    scenario.work()
    old = scenario.open_run_testing(1)

    scenario.restart(1)
    scenario.work()

    assert "restart_requested" in scenario.reasons(1)
    assert scenario.api_state(1) == "testing"
    new = scenario.open_run_testing(1)
    assert new.id != old.id
    assert new.base_sha == old.base_sha
    assert scenario.test_branches() == [f"refs/heads/{new.branch}"]
    assert scenario.run(old.id).status.value == "cancelled"
    scenario.set_status(old.sha or "", "success")
    scenario.work()
    assert scenario.api_state(1) == "testing"

    scenario.settle()

    assert scenario.final() == {1: ("merged", "merged_by_queue")}
    assert scenario.entry(1).verified_by_test_run == new.id
    assert scenario.main_log() == ["Add a (#1)", "initial commit"]


def test_restarting_a_pending_pr_is_refused(scenario: Scenario) -> None:
    """Only a PR that is testing, tests_passed or pending_failure can restart: PR 2, waiting
    for a slot, gets 409 and nothing changes; both PRs merge.
    """
    scenario.create_queue()
    for number in (1, 2):
        scenario.pr(number, {f"f{number}.txt": f"{number}\n"}, title=f"Add {number}")
        scenario.submit(number)
    scenario.work()
    response = scenario.post("restartTestsOnPullRequest", pr={"number": 2})
    assert response.status_code == 409, response.text

    scenario.settle()

    assert scenario.final() == {
        1: ("merged", "merged_by_queue"),
        2: ("merged", "merged_by_queue"),
    }
    assert scenario.main_log() == ["Add 2 (#2)", "Add 1 (#1)", "initial commit"]
