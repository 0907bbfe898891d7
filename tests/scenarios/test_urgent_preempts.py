"""An urgent PR skips the line: it is tested at once on main and the runs ahead restart."""

from __future__ import annotations

from tests.support.scenario import Scenario


def test_urgent_pr_preempts_the_runs_under_test(scenario: Scenario) -> None:
    """Concurrency 2: A and B are testing (B on top of A), C waits. D is submitted as urgent:
    it goes to the front, is tested on main alone, and A is restarted on top of D (reason
    preempted); B gives up its slot. Everything merges, D first, then A, B and C in order.
    """
    scenario.create_queue(concurrency=2)
    for number, name in ((1, "A"), (2, "B"), (3, "C"), (4, "D")):
        scenario.pr(number, {f"{name}.txt": f"{name}\n"}, title=f"Add {name}")
    for number in (1, 2, 3):
        scenario.submit(number)
    scenario.work()
    assert scenario.open_numbers() == [((), (1,)), ((1,), (2,))]
    assert scenario.states() == {1: "testing", 2: "testing", 3: "pending"}

    scenario.submit(4, priority="urgent")
    scenario.work()

    assert scenario.open_numbers() == [((), (4,)), ((4,), (1,))]
    assert scenario.states() == {1: "testing", 2: "pending", 3: "pending", 4: "testing"}
    assert "preempted" in scenario.reasons(1)
    assert "preempted" in scenario.reasons(2)
    assert scenario.get_pr(4)["skipTheLine"] is True
    assert [pr["prNumber"] for pr in scenario.get_queue()["enqueuedPullRequests"]] == [4, 1, 2, 3]

    scenario.settle()

    assert scenario.final() == dict.fromkeys((1, 2, 3, 4), ("merged", "merged_by_queue"))
    assert scenario.main_log() == [
        "Add C (#3)",
        "Add B (#2)",
        "Add A (#1)",
        "Add D (#4)",
        "initial commit",
    ]
    assert scenario.main_files() == {"README.md", "A.txt", "B.txt", "C.txt", "D.txt"}
    assert scenario.test_branches() == []
