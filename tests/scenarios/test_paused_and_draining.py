"""Queue states: a paused queue starts and lands nothing; a draining one takes no new PRs."""

from __future__ import annotations

from tests.support.scenario import Scenario


def test_paused_queue_finishes_runs_but_lands_and_starts_nothing(scenario: Scenario) -> None:
    """Concurrency 2: PRs 1 and 2 are testing and PR 3 waits when the queue is paused. The two
    runs in progress finish and pass, but nothing lands (1 and 2 stay tests_passed), no run
    starts for PR 3, and a PR submitted meanwhile stays not_ready. Once resumed, all four merge
    in order.
    """
    scenario.create_queue(concurrency=2)
    for number in (1, 2, 3, 4):
        scenario.pr(number, {f"f{number}.txt": f"{number}\n"}, title=f"Add {number}")
    for number in (1, 2, 3):
        scenario.submit(number)
    scenario.work()
    assert scenario.states() == {1: "testing", 2: "testing", 3: "pending"}

    assert scenario.update_queue(state="paused")["state"] == "paused"
    scenario.submit(4)
    scenario.settle()

    assert scenario.states() == {1: "tests_passed", 2: "tests_passed", 3: "pending", 4: "not_ready"}
    assert scenario.main_log() == ["initial commit"]
    assert scenario.started == [((), (1,)), ((1,), (2,))]
    assert len(scenario.open_runs()) == 2
    assert scenario.get_queue()["state"] == "paused"

    scenario.set_state("running")
    scenario.settle()

    assert scenario.final() == dict.fromkeys((1, 2, 3, 4), ("merged", "merged_by_queue"))
    assert scenario.main_log() == [
        "Add 4 (#4)",
        "Add 3 (#3)",
        "Add 2 (#2)",
        "Add 1 (#1)",
        "initial commit",
    ]
    assert scenario.main_files() == {"README.md", "f1.txt", "f2.txt", "f3.txt", "f4.txt"}
    assert scenario.test_branches() == []


def test_draining_queue_refuses_new_prs_and_finishes_the_queued_ones(scenario: Scenario) -> None:
    """PRs 1 and 2 are in the queue when it starts draining. Submitting PR 3 answers 409; the
    queued PRs are tested and merge, and the queue stays draining.
    """
    scenario.create_queue()
    for number in (1, 2, 3):
        scenario.pr(number, {f"f{number}.txt": f"{number}\n"}, title=f"Add {number}")
    scenario.submit(1)
    scenario.submit(2)
    scenario.work()

    assert scenario.update_queue(state="draining")["state"] == "draining"
    response = scenario.try_submit(3)
    assert response.status_code == 409, response.text
    assert response.json()["error"]["code"] == "queue_draining"
    # Re-submitting a PR already in the queue only updates its options, even while draining.
    scenario.submit(2, priority="high")

    scenario.settle()

    assert scenario.final() == {
        1: ("merged", "merged_by_queue"),
        2: ("merged", "merged_by_queue"),
    }
    assert scenario.main_log() == ["Add 2 (#2)", "Add 1 (#1)", "initial commit"]
    assert scenario.main_files() == {"README.md", "f1.txt", "f2.txt"}
    assert scenario.get_queue()["state"] == "draining"
